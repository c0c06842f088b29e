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

# `attention --device cuda` runs its ranks as threads sharing the GPU; ranks in processes of an
# mpirun job (the mpi backend moves host memory only) are refused naming the backend, on every
# process, before any GPU is touched (so this runs without one).
if(LONGSEQ_WITH_MPI AND TARGET longseq)
  add_test(NAME attention.cli_device_mpi_refused
           COMMAND ${MPIEXEC_EXECUTABLE} -np 2 $<TARGET_FILE:longseq> attention --random 37,4,2,16
                   --device cuda --backend mpi)
  set_tests_properties(attention.cli_device_mpi_refused PROPERTIES
    LABELS "attention;mpi;cli"
    TIMEOUT 120
    PROCESSORS 2
    PASS_REGULAR_EXPRESSION "--device cuda at --world 2 runs its ranks as threads of one process sharing the GPU: use --backend local \\(got mpi\\)"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
endif()
