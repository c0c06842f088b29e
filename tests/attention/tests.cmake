# `longseq attention` round trip through .npy, checked against PyTorch (float64).
if(NOT Python3_EXECUTABLE)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch, numpy" RESULT_VARIABLE _torch_rc
                OUTPUT_QUIET ERROR_QUIET)
if(_torch_rc EQUAL 0)
  add_test(NAME attention.cli_vs_torch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cli_vs_torch.py $<TARGET_FILE:longseq>
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_vs_torch)
  set_tests_properties(attention.cli_vs_torch PROPERTIES LABELS "attention;torch" TIMEOUT 300)
else()
  message(STATUS "[tests] ${Python3_EXECUTABLE} cannot import torch: attention.cli_vs_torch not registered")
endif()
