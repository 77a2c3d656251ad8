// The CPU kernels' entry points, bound to Python in bindings.cpp.
#pragma once

#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>

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
torch::Tensor int4_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scales, torch::Tensor offsets,
                          int64_t N, std::optional<torch::Tensor> bias, bool int8_activations);

}  // namespace tokenmill
