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
// Linears (four per layer: qkv, o, gate_up, down), each (kind, a, b, bias) as the module that
// runs it in Python computes (kernels/native_decoder.py describes them):
//   panels  invariant_linear(x, a)                       InvariantLinear
//   onednn  mkldnn::_linear_pointwise(x, a)               PackedLinear (a: oneDNN's packed weight)
//   mixed   panels on a up to mixed_max_rows rows, else onednn on b      MixedLinear
//   torch   at::linear(x, a)                              nn.Linear
//   int8    _weight_int8pack_mm(x in b's dtype, a, b)     Int8Linear (a: int8 [N, K], b: scales)
//   int8rows int8_linear(x in b's dtype, a, b)           Int8Linear on the C++ kernel (AVX-512 builds)
//   int4    int4_linear(x, a); from dense_min_rows rows, when it keeps one, its dense copy b (of
//           dense kind panels, onednn or torch) on x in b's dtype, then the bias   Int4Linear
// Empty (numel 0) tensors stand for "no bias" and "no second tensor".
#include "ops.h"

#include <cstring>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

enum LinearKind : int64_t { kPanels = 0, kInt4 = 1, kOneDNN = 2, kMixed = 3, kTorch = 4, kInt8 = 5, kInt8Rows = 6 };

struct LinearRef {
    int64_t kind;
    const torch::Tensor& a;
    const torch::Tensor& b;
    const torch::Tensor& bias;
    int64_t n;
    int64_t dense_kind;
    bool int8_activations;
};

struct Thresholds {
    int64_t dense_min_rows, mixed_max_rows;
};

bool present(const torch::Tensor& t) { return t.defined() && t.numel() > 0; }

std::optional<torch::Tensor> opt(const torch::Tensor& t) {
    return present(t) ? std::optional<torch::Tensor>(t) : std::nullopt;
}

// PackedLinear.forward's call: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "").
torch::Tensor onednn_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& bias) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
    std::vector<c10::IValue> stack;
    stack.emplace_back(x);
    stack.emplace_back(packed);
    stack.emplace_back(present(bias) ? c10::IValue(bias) : c10::IValue());
    stack.emplace_back(std::string("none"));
    stack.emplace_back(c10::List<std::optional<at::Scalar>>());
    stack.emplace_back(std::string(""));
    op.callBoxed(&stack);
    return stack[0].toTensor();
}

// One of the plain kinds (panels, onednn, torch) on weight w.
torch::Tensor plain_linear(int64_t kind, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                           int64_t n) {
    switch (kind) {
        case kPanels: return tokenmill::invariant_linear(x, w, n, opt(bias));
        case kOneDNN: return onednn_linear(x, w, bias);
        case kTorch: return at::linear(x, w, opt(bias));
        default: TORCH_CHECK(false, "decoder_layers: unknown linear kind ", kind);
    }
}

torch::Tensor run_linear(const LinearRef& l, const torch::Tensor& x, const Thresholds& th) {
    switch (l.kind) {
        case kMixed:
            return x.size(0) > th.mixed_max_rows ? onednn_linear(x, l.b, l.bias)
                                                 : tokenmill::invariant_linear(x, l.a, l.n, opt(l.bias));
        case kInt8:
        case kInt8Rows: {
            // Int8Linear.forward: x in the scales' (compute) dtype, x's dtype out, then the bias.
            const torch::Tensor xc = x.to(l.b.scalar_type()).contiguous();
            torch::Tensor y = (l.kind == kInt8 ? at::_weight_int8pack_mm(xc, l.a, l.b)
                                               : tokenmill::int8_linear(xc, l.a, l.b, std::nullopt))
                                  .to(x.scalar_type());
            return present(l.bias) ? y + l.bias : y;
        }
        case kInt4:
            if (present(l.b) && x.size(0) >= th.dense_min_rows) {
                // Int4Linear.forward's dense branch: the copy's dtype in, x's dtype out, then the bias.
                torch::Tensor y =
                    plain_linear(l.dense_kind, x.to(l.b.scalar_type()), l.b, torch::Tensor(), l.n).to(x.scalar_type());
                return present(l.bias) ? y + l.bias : y;
            }
            return tokenmill::int4_linear(x.contiguous(), l.a, l.n, opt(l.bias), l.int8_activations);
        default:
            return plain_linear(l.kind, x, l.a, l.bias, l.n);
    }
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
                             const std::vector<int64_t>& kinds, const std::vector<torch::Tensor>& a,
                             const std::vector<torch::Tensor>& b, const std::vector<torch::Tensor>& biases,
                             const std::vector<int64_t>& out_features, const std::vector<int64_t>& dense_kinds,
                             const std::vector<bool>& int8_activations, int64_t num_heads, int64_t num_kv_heads,
                             int64_t head_dim, int64_t dense_min_rows, int64_t mixed_max_rows) {
    const int64_t L = static_cast<int64_t>(caches.size()), T = x.size(0);
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
                "decoder_layers: x must be the contiguous float32 residual [T, H]");
    TORCH_CHECK(static_cast<int64_t>(input_norms.size()) == L && static_cast<int64_t>(post_norms.size()) == L,
                "decoder_layers: one input and one post-attention norm per layer");
    for (const auto* v : {&a, &b, &biases})
        TORCH_CHECK(static_cast<int64_t>(v->size()) == 4 * L, "decoder_layers: four linears per layer");
    for (const auto* v : {&kinds, &out_features, &dense_kinds})
        TORCH_CHECK(static_cast<int64_t>(v->size()) == 4 * L, "decoder_layers: four linears per layer");
    TORCH_CHECK(static_cast<int64_t>(int8_activations.size()) == 4 * L, "decoder_layers: four linears per layer");
    const Thresholds th{dense_min_rows, mixed_max_rows};
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
            return run_linear({kinds[j], a[j], b[j], biases[j], out_features[j], dense_kinds[j], int8_activations[j]},
                              in, th);
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
