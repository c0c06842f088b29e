# tests/kernels extra registrations (included by tests/CMakeLists.txt).
#
# kernels.ref_torch: the fp64 reference kernels against PyTorch autograd in float64.
# ref_dump writes seeded inputs and the reference's outputs as .npy; ref_vs_torch.py recomputes
# them with torch (an independent implementation) and exits non-zero on any mismatch.
add_executable(ref_dump ${CMAKE_CURRENT_LIST_DIR}/torch/ref_dump.cpp)
target_link_libraries(ref_dump PRIVATE longseq_flags longseq_kernels longseq_core)

if(LONGSEQ_TORCH_FOUND)
  add_test(NAME kernels.ref_torch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/torch/ref_vs_torch.py
                   --dump $<TARGET_FILE:ref_dump>)
  set_tests_properties(kernels.ref_torch PROPERTIES LABELS "kernels;torch" TIMEOUT 120)
endif()
