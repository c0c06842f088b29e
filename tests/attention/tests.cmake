# `longseq attention` round trip through .npy, checked against PyTorch (float64).
if(LONGSEQ_TORCH_FOUND)
  add_test(NAME attention.cli_vs_torch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cli_vs_torch.py $<TARGET_FILE:longseq>
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_vs_torch)
  set_tests_properties(attention.cli_vs_torch PROPERTIES LABELS "attention;torch" TIMEOUT 300)
endif()
