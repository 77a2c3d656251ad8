// The CPU kernels' entry points, bound to Python in bindings.cpp.
#pragma once

#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace tokenmill {

// paged_decode_attention.cpp
torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                     torch::Tensor block_tables, torch::Tensor context_lens,
                                     int64_t block_size, double scale);

// mla_decode_attention.cpp
torch::Tensor paged_mla_attention(torch::Tensor q, torch::Tensor cache, torch::Tensor block_tables,
                                  torch::Tensor context_lens, int64_t block_size, double scale, int64_t v_dim);

// fused_ops.cpp
torch::Tensor add_rms_norm(torch::Tensor residual, std::optional<torch::Tensor> delta, torch::Tensor weight,
                           double eps);
torch::Tensor silu_and_mul(torch::Tensor gate_up);
torch::Tensor rotary_embedding(torch::Tensor x, torch::Tensor cos, torch::Tensor sin);
std::tuple<torch::Tensor, torch::Tensor> argmax_rows(torch::Tensor x);

// invariant_linear.cpp
torch::Tensor pack_invariant_weight(torch::Tensor weight);
torch::Tensor invariant_linear(torch::Tensor x, torch::Tensor packed, int64_t N, std::optional<torch::Tensor> bias);

// int4_linear.cpp
std::string int4_linear_isa();
torch::Tensor int4_linear(torch::Tensor x, torch::Tensor packed, int64_t N, std::optional<torch::Tensor> bias,
                          bool int8_activations);

// int8_linear.cpp
std::string int8_linear_isa();
torch::Tensor int8_linear(torch::Tensor x, torch::Tensor qweight, torch::Tensor scales,
                          std::optional<torch::Tensor> bias);

// decoder_layers.cpp
torch::Tensor decoder_layers(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, const std::vector<torch::Tensor>& caches,
                             torch::Tensor slot_mapping, torch::Tensor block_tables, torch::Tensor context_lens,
                             int64_t block_size, double scale, const std::vector<torch::Tensor>& input_norms,
                             const std::vector<torch::Tensor>& post_norms, double eps,
                             const std::vector<int64_t>& kinds, const std::vector<torch::Tensor>& a,
                             const std::vector<torch::Tensor>& b, const std::vector<torch::Tensor>& biases,
                             const std::vector<int64_t>& out_features, const std::vector<int64_t>& dense_kinds,
                             const std::vector<bool>& int8_activations, int64_t num_heads, int64_t num_kv_heads,
                             int64_t head_dim, int64_t dense_min_rows, int64_t mixed_max_rows);

}  // namespace tokenmill
