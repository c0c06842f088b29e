# tests/tokenizer reads the shipped corpus by absolute path and runs `longseq tokenize` end to end.
if(TARGET test_tokenizer)
  target_compile_definitions(test_tokenizer PRIVATE LONGSEQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(TARGET longseq)
    target_compile_definitions(test_tokenizer PRIVATE LONGSEQ_CLI="$<TARGET_FILE:longseq>")
    add_dependencies(test_tokenizer longseq)
  endif()
endif()
