# model.torch: the whole model (2 local ranks, burst, zigzag, ZeRO-3, every checkpoint policy,
# tied and untied embeddings) against a float64 PyTorch autograd LLaMA written after Hugging Face
# modeling_llama, reading our safetensors by Hugging Face names.
add_executable(model_dump ${CMAKE_CURRENT_LIST_DIR}/torch/model_dump.cpp)
target_link_libraries(model_dump PRIVATE longseq_flags longseq_train longseq_model
                      longseq_attention longseq_comm longseq_kernels longseq_core
                      nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX Threads::Threads)
if(LONGSEQ_TORCH_FOUND)
  add_test(NAME model.torch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/torch/model_vs_torch.py
                   --dump $<TARGET_FILE:model_dump>)
  set_tests_properties(model.torch PROPERTIES LABELS "model;torch" TIMEOUT 120)
endif()
