# attention_kernel_bench measures kernels/ (and, --entry local, attention/local.hpp over them):
# link just what it uses (not the upper layers the generic bench rule adds). LONGSEQ_SOURCE_DIR
# (where it finds bench/attention_torch_naive.py, the PyTorch baseline) comes from the generic
# rule.
if(TARGET attention_kernel_bench)
  set_property(TARGET attention_kernel_bench PROPERTY LINK_LIBRARIES longseq_flags
               longseq_attention longseq_kernels longseq_core OpenMP::OpenMP_CXX
               nlohmann_json::nlohmann_json)
endif()
