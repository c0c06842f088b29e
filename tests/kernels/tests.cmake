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

# kernels.isa_symbols.<variant>: no kernel variant's object defines code outside its own namespace
# (tests/kernels/isa_symbols.sh says why).
find_program(LONGSEQ_NM nm)
if(LONGSEQ_NM)
  foreach(v ${LONGSEQ_ISA_VARIANTS})
    add_test(NAME kernels.isa_symbols.${v}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/isa_symbols.sh ${v}
                     $<TARGET_OBJECTS:longseq_kernels_${v}>)
    set_tests_properties(kernels.isa_symbols.${v} PROPERTIES LABELS kernels TIMEOUT 60)
  endforeach()
endif()

# kernels.portable_code: no AVX instruction in the longseq binary outside the kernel variants
# (tests/kernels/portable_code.sh), so the installed binary runs on any x86-64 CPU.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND NOT LONGSEQ_NATIVE)
  add_test(NAME kernels.portable_code
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/portable_code.sh $<TARGET_FILE:longseq>)
  set_tests_properties(kernels.portable_code PROPERTIES LABELS kernels TIMEOUT 120
                                                        SKIP_RETURN_CODE 77)
endif()

# kernels.errors_table: the per-kernel error table of scripts/gpu_check.sh (errors.txt), built from
# the errors the tests record, checked on the CPU registry cases (tests/kernels/errors_table.sh).
if(Python3_Interpreter_FOUND)
  add_test(NAME kernels.errors_table
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/errors_table.sh $<TARGET_FILE:test_kernels>
                   ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/cuda_test_errors.py)
  set_tests_properties(kernels.errors_table PROPERTIES LABELS kernels TIMEOUT 120)
endif()
