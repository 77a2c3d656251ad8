// A Llama-family model's decoder layers for one step in one call (CPU): the C++ kernels the
// Python layer loop of model/llama.py calls (add_rms_norm, the linears, rotary_embedding,
// paged_decode_attention, silu_and_mul), in the same order on the same tensors, so the
// results are bitwise those of that loop; what goes is the Python between them.
//
// Why: a batch-1 decode step of the embedded model runs about 30 torch calls per layer from
// Python (module calls, views, splits, two index_put_ for the KV write), and on a 2-core CPU
// that interpreter and dispatch time measured as large as the kernels' own
// (docs/PERFORMANCE.md, "The decoder layers in one C++ call"). This is the CPU counterpart
// of a captured CUDA graph: one entry per step, no per-op host work in between.
//
// Per layer l (x: the float32 residual stream [T, H], updated in place; pending: the previous
// layer's MLP output, added by the next norm):
//   h = add_rms_norm(x, pending, input_norm[l]);  qkv = linear(h, 4l)        [T, (Hq + 2 Hkv) D]
//   q|k = rotary_embedding(qkv[:, :(Hq + Hkv) D]); v = qkv[:, (Hq + Hkv) D:]
//   cache[l][slot / bs, 0|1, :, slot % bs] = k|v        (cache [num_blocks, 2, Hkv, bs, D])
//   o = paged_decode_attention(q, cache[l][:, 0], cache[l][:, 1]);  a = linear(o, 4l + 1)
//   h = add_rms_norm(x, a, post_norm[l]);  pending = linear(silu_and_mul(linear(h, 4l + 2)), 4l + 3)
// Returns the last pending; the caller's final norm adds it.
//
// Linears (four per layer: qkv, o, gate_up, down): kind 0 = the panel kernel
// (invariant_linear.cpp), kind 1 = int4_linear, whose calls of dense_min_rows rows or more
// run on the layer's bf16 panel copy when it keeps one (kernels/int4_linear.py's rule).
// Undefined (numel 0) tensors stand for "no bias" and "no dense copy".
#include "ops.h"

#include <cstring>
#include <vector>

namespace {

enum LinearKind : int64_t { kPanels = 0, kInt4 = 1 };

struct LinearRef {
    int64_t kind;
    const torch::Tensor& packed;
    const torch::Tensor& dense;
    const torch::Tensor& bias;
    int64_t n;
    bool int8_activations;
};

std::optional<torch::Tensor> opt(const torch::Tensor& t) {
    return t.numel() ? std::optional<torch::Tensor>(t) : std::nullopt;
}

torch::Tensor run_linear(const LinearRef& l, const torch::Tensor& x, int64_t dense_min_rows) {
    if (l.kind == kPanels) return tokenmill::invariant_linear(x, l.packed, l.n, opt(l.bias));
    if (l.dense.numel() && x.size(0) >= dense_min_rows) {
        // Int4Linear.forward's dense branch: the copy's dtype in, x's dtype out, then the bias.
        torch::Tensor y = tokenmill::invariant_linear(x.to(torch::kBFloat16), l.dense, l.n, std::nullopt)
                              .to(x.scalar_type());
        return l.bias.numel() ? y + l.bias : y;
    }
    return tokenmill::int4_linear(x.contiguous(), l.packed, l.n, opt(l.bias), l.int8_activations);
}

// k, v [T, Hkv, D] (rows may be strided, heads and D dense) -> the layer's cache at slots.
void write_kv(const torch::Tensor& cache, const torch::Tensor& k, const torch::Tensor& v, const int64_t* slots,
              int64_t T) {
    const int64_t num_blocks = cache.size(0), Hkv = cache.size(2), bs = cache.size(3), D = cache.size(4);
    const int64_t elt = cache.element_size();
    char* base = static_cast<char*>(cache.data_ptr());
    const torch::Tensor* parts[2] = {&k, &v};
    for (int64_t t = 0; t < T; ++t) {
        const int64_t slot = slots[t];
        TORCH_CHECK(slot >= 0 && slot < num_blocks * bs, "decoder_layers: slot ", slot, " out of the cache");
        const int64_t b = slot / bs, o = slot % bs;
        for (int part = 0; part < 2; ++part) {
            const torch::Tensor& src = *parts[part];
            const char* row = static_cast<const char*>(src.data_ptr()) + t * src.stride(0) * elt;
            for (int64_t h = 0; h < Hkv; ++h)
                std::memcpy(base + (b * cache.stride(0) + part * cache.stride(1) + h * cache.stride(2) +
                                    o * cache.stride(3)) * elt,
                            row + h * D * elt, D * elt);
        }
    }
}

}  // namespace

namespace tokenmill {

torch::Tensor decoder_layers(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, const std::vector<torch::Tensor>& caches,
                             torch::Tensor slot_mapping, torch::Tensor block_tables, torch::Tensor context_lens,
                             int64_t block_size, double scale, const std::vector<torch::Tensor>& input_norms,
                             const std::vector<torch::Tensor>& post_norms, double eps,
                             const std::vector<int64_t>& kinds, const std::vector<torch::Tensor>& packed,
                             const std::vector<torch::Tensor>& dense, const std::vector<torch::Tensor>& biases,
                             const std::vector<int64_t>& out_features, const std::vector<bool>& int8_activations,
                             int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t dense_min_rows) {
    const int64_t L = static_cast<int64_t>(caches.size()), T = x.size(0);
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
                "decoder_layers: x must be the contiguous float32 residual [T, H]");
    TORCH_CHECK(static_cast<int64_t>(input_norms.size()) == L && static_cast<int64_t>(post_norms.size()) == L,
                "decoder_layers: one input and one post-attention norm per layer");
    for (const auto* v : {&packed, &dense, &biases})
        TORCH_CHECK(static_cast<int64_t>(v->size()) == 4 * L, "decoder_layers: four linears per layer");
    TORCH_CHECK(static_cast<int64_t>(kinds.size()) == 4 * L && static_cast<int64_t>(out_features.size()) == 4 * L &&
                    static_cast<int64_t>(int8_activations.size()) == 4 * L,
                "decoder_layers: four linears per layer");
    TORCH_CHECK(slot_mapping.scalar_type() == torch::kLong && slot_mapping.is_contiguous() &&
                    slot_mapping.numel() == T,
                "decoder_layers: slot_mapping must be contiguous int64 [T]");
    const int64_t q_size = num_heads * head_dim, kv_size = num_kv_heads * head_dim;
    const int64_t* slots = slot_mapping.data_ptr<int64_t>();
    std::optional<torch::Tensor> pending;
    for (int64_t l = 0; l < L; ++l) {
        const torch::Tensor& cache = caches[l];
        TORCH_CHECK(cache.dim() == 5 && cache.size(1) == 2 && cache.size(2) == num_kv_heads &&
                        cache.size(3) == block_size && cache.size(4) == head_dim && cache.is_contiguous(),
                    "decoder_layers: each cache must be contiguous [num_blocks, 2, Hkv, block_size, D]");
        auto linear = [&](int64_t i, const torch::Tensor& in) {
            const int64_t j = 4 * l + i;
            return run_linear({kinds[j], packed[j], dense[j], biases[j], out_features[j], int8_activations[j]}, in,
                              dense_min_rows);
        };
        torch::Tensor h = add_rms_norm(x, pending, input_norms[l], eps);
        torch::Tensor qkv = linear(0, h);  // [T, q_size + 2 kv_size]
        TORCH_CHECK(qkv.size(1) == q_size + 2 * kv_size, "decoder_layers: qkv width disagrees with the heads");
        torch::Tensor qk = rotary_embedding(qkv.narrow(1, 0, q_size + kv_size).view({T, num_heads + num_kv_heads,
                                                                                      head_dim}),
                                            cos, sin);
        torch::Tensor q = qk.narrow(1, 0, num_heads), k = qk.narrow(1, num_heads, num_kv_heads);
        torch::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size).view({T, num_kv_heads, head_dim});
        TORCH_CHECK(k.scalar_type() == cache.scalar_type(), "decoder_layers: cache dtype must be the model's");
        write_kv(cache, k, v, slots, T);
        torch::Tensor o = paged_decode_attention(q, cache.select(1, 0), cache.select(1, 1), block_tables, context_lens,
                                                 block_size, scale);  // [T, Hq, D]
        torch::Tensor attn = linear(1, o.view({T, q_size}));
        h = add_rms_norm(x, attn, post_norms[l], eps);
        pending = linear(3, silu_and_mul(linear(2, h)));
    }
    TORCH_CHECK(pending.has_value(), "decoder_layers: no layers");
    return *pending;
}

}  // namespace tokenmill
