# MPI registrations of the comm suite: the same parameterised tests (Mpi/* instances) run under
# mpirun with 3 and 4 processes. The Local/* instances run through gtest_discover_tests and skip
# nothing; the Mpi/* instances skip themselves when not started by mpirun.
#
# OpenMPI refuses to start as root unless --allow-run-as-root is given or both
# OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set: the environment is set
# per test below, so `ctest` works in root containers (CI) and as a normal user alike.
# --oversubscribe lets 4 ranks start on a machine with fewer cores.
if(LONGSEQ_WITH_MPI AND TARGET test_comm)
  # The Failure suite runs in processes of its own (failed worlds keep their communicators until
  # MPI_Finalize; docs/comm.md "The lost 4-byte message" tells why).
  foreach(np 3 4)
    foreach(part "" "_failure")
      if(part STREQUAL "")
        set(_filter "Mpi/*:-Mpi/Failure.*")
      else()
        set(_filter "Mpi/Failure.*")
      endif()
      add_test(NAME comm_mpi_np${np}${part}
               COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${np}
                       $<TARGET_FILE:test_comm> --gtest_filter=${_filter} --gtest_color=no)
      set_tests_properties(comm_mpi_np${np}${part} PROPERTIES
        LABELS "comm;mpi"
        TIMEOUT 300
        PROCESSORS ${np}
        ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    endforeach()
  endforeach()
endif()

# Transfers over 2 GiB (tests/comm/big_message_test.cpp): 2.5 GiB from rank 0 to rank 1, under
# mpirun -np 2 with the MPI backend's default 1 GiB chunk limit, and through the local backend.
# Each takes ~5 GiB of memory, so they run only here (LONGSEQ_COMM_BIG=1; the copies that
# gtest_discover_tests registers skip) and one at a time (RESOURCE_LOCK), in a few seconds each.
if(TARGET test_comm)
  set(_big_env "LONGSEQ_COMM_BIG=1")
  if(LONGSEQ_WITH_MPI)
    add_test(NAME comm_mpi_big_np2
             COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 2
                     -x LONGSEQ_COMM_BIG $<TARGET_FILE:test_comm>
                     --gtest_filter=BigMessage.TwoAndAHalfGiBThroughMpi --gtest_color=no)
    set_tests_properties(comm_mpi_big_np2 PROPERTIES
      LABELS "comm;mpi"
      TIMEOUT 180
      PROCESSORS 2
      RESOURCE_LOCK comm_big_memory
      ENVIRONMENT "${_big_env};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endif()
  add_test(NAME comm_local_big
           COMMAND $<TARGET_FILE:test_comm> --gtest_filter=BigMessage.TwoAndAHalfGiBThroughLocalThreads
                   --gtest_color=no)
  set_tests_properties(comm_local_big PROPERTIES
    LABELS "comm"
    TIMEOUT 180
    PROCESSORS 2
    RESOURCE_LOCK comm_big_memory
    ENVIRONMENT "${_big_env}")
endif()

# The CLI under mpirun (issue 14): `attention` byte-identical to the local backend for several
# algorithms and odd lengths, a bad flag non-zero on every process, `train` losses equal to the
# local backend's (tests/comm/cli_mpirun.sh; a few seconds per world).
if(LONGSEQ_WITH_MPI AND TARGET longseq)
  foreach(np 2 3 4)
    add_test(NAME comm.cli_mpirun_np${np}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_mpirun.sh $<TARGET_FILE:longseq>
                     ${PROJECT_SOURCE_DIR}/data/kjv-genesis-exodus.txt ${np}
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_mpirun_np${np})
    set_tests_properties(comm.cli_mpirun_np${np} PROPERTIES
      LABELS "comm;mpi;cli"
      TIMEOUT 300
      PROCESSORS 2
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endif()
