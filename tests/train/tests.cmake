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
