# tests/train reads the shipped corpus (data/) by absolute path.
if(TARGET test_train)
  target_compile_definitions(test_train PRIVATE LONGSEQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
