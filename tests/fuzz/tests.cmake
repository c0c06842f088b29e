# Fuzz harnesses (tests/fuzz/fuzz_<parser>.cpp, one LLVMFuzzerTestOneInput each; docs/reliability.md).
# * Every build: fuzz_replay_<parser> (the harness + replay_main.cpp, any compiler) and a CTest
#   fuzz_replay_<parser> (label fuzz) that runs it over the committed corpus/<parser>/: the seeds
#   and every crash the fuzzers found, so each stays a regression test.
# * -DLONGSEQ_FUZZ=ON with clang (scripts/ci_fuzz.sh): fuzz_<parser>, the libFuzzer binaries.
set(LONGSEQ_FUZZ_TARGETS npy safetensors st_index token_file trainer_state checksums hf_config
    tokenizer mask preset hardware)
set(_fuzz_libs longseq_tokenizer longseq_train longseq_plan longseq_model longseq_attention longseq_comm longseq_kernels
    longseq_core nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX Threads::Threads)
# Each harness is compiled once (an object library) and linked into both executables; the replay
# driver once for all of them.
add_library(fuzz_replay_main OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/replay_main.cpp)
target_link_libraries(fuzz_replay_main PRIVATE longseq_flags)
target_compile_options(fuzz_replay_main PRIVATE ${LONGSEQ_TEST_FLAGS})
foreach(name ${LONGSEQ_FUZZ_TARGETS})
  add_library(fuzz_obj_${name} OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${name}.cpp)
  target_link_libraries(fuzz_obj_${name} PRIVATE longseq_flags ${_fuzz_libs})
  add_executable(fuzz_replay_${name} $<TARGET_OBJECTS:fuzz_obj_${name}>
                 $<TARGET_OBJECTS:fuzz_replay_main>)
  target_link_libraries(fuzz_replay_${name} PRIVATE longseq_flags ${_fuzz_libs})
  add_test(NAME fuzz_replay_${name}
           COMMAND fuzz_replay_${name} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS fuzz TIMEOUT 300)
  if(LONGSEQ_FUZZ)
    add_executable(fuzz_${name} $<TARGET_OBJECTS:fuzz_obj_${name}>)
    target_link_libraries(fuzz_${name} PRIVATE longseq_flags ${_fuzz_libs})
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()
