# `longseq attention` round trip through .npy, checked against PyTorch (float64).
if(LONGSEQ_TORCH_FOUND)
  add_test(NAME attention.cli_vs_torch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cli_vs_torch.py $<TARGET_FILE:longseq>
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_vs_torch)
  set_tests_properties(attention.cli_vs_torch PROPERTIES LABELS "attention;torch" TIMEOUT 300)
endif()

# `--precision bf16` runs end to end; an unknown precision is refused naming it.
add_test(NAME attention.cli_precision_bf16
         COMMAND longseq attention --random 45,4,2,12 --world 3 --algo burst --mask causal --precision bf16)
set_tests_properties(attention.cli_precision_bf16 PROPERTIES LABELS attention
                     PASS_REGULAR_EXPRESSION "burst attention \\(bf16\\)")
add_test(NAME attention.cli_precision_refused
         COMMAND longseq attention --random 45,4,2,12 --precision f16)
set_tests_properties(attention.cli_precision_refused PROPERTIES LABELS attention WILL_FAIL TRUE)
add_test(NAME attention.cli_precision_refused_names_it
         COMMAND longseq attention --random 45,4,2,12 --precision f16)
set_tests_properties(attention.cli_precision_refused_names_it PROPERTIES LABELS attention
                     PASS_REGULAR_EXPRESSION "--precision 'f16'")
