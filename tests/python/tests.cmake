# The Python package's tests (label python; docs/python.md): pytest files run by Debian's python3
# against build/python, one CTest test per file so they spread over the cores; context
# parallelism under mpirun at 2, 3 and 4 processes; the example's losses and gradients at
# -np 4 (and 3) against -np 1. They need the package (LONGSEQ_WITH_PYTHON) and torch.
if(LONGSEQ_WITH_PYTHON AND LONGSEQ_TORCH_FOUND)
  # test_context_parallel.py opens an MPI world of 1 without mpirun (as root in CI).
  set(_py_env "PYTHONPATH=${PROJECT_BINARY_DIR}/python" "LONGSEQ_CLI=$<TARGET_FILE:longseq>"
              "OMP_NUM_THREADS=2" "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  file(GLOB _py_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.py)
  foreach(f ${_py_tests})
    get_filename_component(_name ${f} NAME_WE)
    string(REPLACE "test_" "" _name ${_name})
    add_test(NAME python.${_name}
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider --rootdir
                     ${CMAKE_CURRENT_LIST_DIR} ${f}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(python.${_name} PROPERTIES LABELS python TIMEOUT 900
                         ENVIRONMENT "${_py_env}")
  endforeach()
  # CUDA tensors: the cuda label too; where torch sees no GPU the file skips itself, and CTest
  # reports it skipped, never passed (design.md §10).
  set_tests_properties(python.cuda PROPERTIES LABELS "python;cuda"
                       SKIP_REGULAR_EXPRESSION "[0-9]+ skipped")
  # test_rank_failed.py starts its own mpirun -np 2 (a failing rank; rank 0 must catch it);
  # without MPI or mpirun it skips itself, reported skipped as python.cuda is.
  set_tests_properties(python.rank_failed PROPERTIES LABELS "python;mpi" PROCESSORS 2
                       SKIP_REGULAR_EXPRESSION "[0-9]+ skipped")
  if(LONGSEQ_WITH_MPI)
    set(_mpi_env ${_py_env} "OMPI_MCA_rmaps_base_oversubscribe=1" "OMP_NUM_THREADS=1")
    foreach(np 2 3 4)
      add_test(NAME python.mpi_context_parallel.np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} -np ${np} ${Python3_EXECUTABLE}
                       ${CMAKE_CURRENT_LIST_DIR}/mpi_context_parallel.py)
      set_tests_properties(python.mpi_context_parallel.np${np} PROPERTIES
        LABELS "python;mpi" TIMEOUT 900 PROCESSORS 2 ENVIRONMENT "${_mpi_env}")
    endforeach()
    # examples/torch_cp_llama.py: -np 1, 3 and 4 give the same losses and first-step gradients.
    add_test(NAME python.example_equal_across_ranks
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/example_equal.sh ${MPIEXEC_EXECUTABLE}
                     ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/torch_cp_llama.py
                     ${CMAKE_CURRENT_BINARY_DIR}/example_equal)
    set_tests_properties(python.example_equal_across_ranks PROPERTIES
      LABELS "python;mpi" TIMEOUT 900 PROCESSORS 2 ENVIRONMENT "${_mpi_env}")
  endif()
endif()
