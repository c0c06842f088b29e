# tests/kernels extra registrations (included by tests/CMakeLists.txt).
#
# kernels.ref_torch: the fp64 reference kernels against PyTorch autograd in float64.
# ref_dump writes seeded inputs and the reference's outputs as .npy; ref_vs_torch.py recomputes
# them with torch (an independent implementation) and exits non-zero on any mismatch.
add_executable(ref_dump ${CMAKE_CURRENT_LIST_DIR}/torch/ref_dump.cpp)
target_link_libraries(ref_dump PRIVATE longseq_flags longseq_kernels longseq_core)

# The oracle is Debian's python3 (torch 1.13 + numpy), never a python3 from PATH.
if(NOT Python3_EXECUTABLE)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch, numpy"
                  RESULT_VARIABLE _longseq_torch_rc OUTPUT_QUIET ERROR_QUIET)
endif()
if(Python3_Interpreter_FOUND AND _longseq_torch_rc EQUAL 0)
  add_test(NAME kernels.ref_torch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/torch/ref_vs_torch.py
                   --dump $<TARGET_FILE:ref_dump>)
  set_tests_properties(kernels.ref_torch PROPERTIES LABELS "kernels;torch" TIMEOUT 120)
else()
  message(STATUS "kernels.ref_torch not registered: ${Python3_EXECUTABLE} cannot import torch "
                 "and numpy (install python3-torch and python3-numpy, scripts/setup.sh)")
endif()
