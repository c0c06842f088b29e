# tests/train reads the shipped corpus (data/) by absolute path.
if(TARGET test_train)
  target_compile_definitions(test_train PRIVATE LONGSEQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # config_flags_test declares the table's flags through cli/table_flags.hpp (header only).
  target_link_libraries(test_train PRIVATE CLI11::CLI11)
endif()
# cli_train_test runs `longseq train` end to end, so the binary is built first.
if(TARGET test_train AND TARGET longseq)
  target_compile_definitions(test_train PRIVATE LONGSEQ_CLI="$<TARGET_FILE:longseq>")
  add_dependencies(test_train longseq)
endif()

# `train --device cuda` above world 1 runs its ranks as threads sharing the GPU; an mpirun job is
# refused naming it, on every process, before any GPU is touched (so this runs without one).
if(LONGSEQ_WITH_MPI AND TARGET longseq)
  add_test(NAME train.cli_device_mpirun_refused
           COMMAND ${MPIEXEC_EXECUTABLE} -np 2 $<TARGET_FILE:longseq> train --preset tiny --steps 1
                   --device cuda --world 2 --quiet)
  set_tests_properties(train.cli_device_mpirun_refused PROPERTIES
    LABELS "train;mpi;cli"
    TIMEOUT 120
    PROCESSORS 2
    PASS_REGULAR_EXPRESSION "--device cuda at --world 2 runs its ranks as threads of one process sharing the GPU; under mpirun"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;LONGSEQ_DATA_DIR=${PROJECT_SOURCE_DIR}/data")
endif()
