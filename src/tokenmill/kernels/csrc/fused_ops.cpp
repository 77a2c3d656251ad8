// Fused elementwise kernels for the CPU decoder layer: each replaces a chain of
// 3-6 torch ops (and their temporaries and dtype casts) with one pass over the
// data, computed in float32 and rounded once to the storage dtype.
//
//   add_rms_norm     residual [T, H] float32 (updated in place), delta [T, H]
//                    (dtype of weight, or none), weight [H] -> out [T, H] dtype of weight
//                    residual += delta; out = residual * rsqrt(mean(residual^2) + eps) * weight
//   silu_and_mul     gate_up [T, 2I] -> out [T, I]: silu(gate_up[:, :I]) * gate_up[:, I:]
//   rotary_embedding x [T, heads, D] (any row stride, heads and D dense), cos/sin [T, D]
//                    float32 -> x rotated in place, Hugging Face layout (rotate_half of
//                    two halves): x * cos + cat(-x2, x1) * sin
//   argmax_rows      x [R, V] (rows may be strided) -> ([R] int64 first index of each
//                    row's max (torch.argmax's tie rule; NaNs are skipped), [R] int64
//                    how many columns hold that max: ties the sampler breaks, see sampler.py).
//                    Greedy sampling over bf16 logits: torch's bf16 argmax is
//                    scalar (~20 ms for 256 x 49152 here), widening first costs ~14 ms.
// Rows are split across torch's intra-op threads.
#include "ops.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

namespace {

constexpr int64_t kRowsPerTask = 16;  // rows are ~1-6K floats: smaller tasks cost more to hand out than to run

template <typename T>
void add_rms_norm_row(float* x, const T* d, const T* w, T* o, int64_t H, float eps) {
    int64_t j = 0;
    float ss = 0.f;
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        __m512 acc = _mm512_setzero_ps();
        for (; j + 16 <= H; j += 16) {
            __m512 v = tokenmill::load16(x + j);
            if (d) {
                v = _mm512_add_ps(v, tokenmill::load16(d + j));
                _mm512_storeu_ps(x + j, v);
            }
            acc = _mm512_fmadd_ps(v, v, acc);
        }
        ss = _mm512_reduce_add_ps(acc);
    }
#elif defined(__AVX2__) && defined(__FMA__)
    if constexpr (tokenmill::has_vec8<T>) {
        __m256 acc = _mm256_setzero_ps();
        for (; j + 8 <= H; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            if (d) {
                v = _mm256_add_ps(v, tokenmill::load8(d + j));
                _mm256_storeu_ps(x + j, v);
            }
            acc = _mm256_fmadd_ps(v, v, acc);
        }
        ss = tokenmill::hsum8(acc);
    }
#endif
    for (; j < H; ++j) {
        if (d) x[j] += static_cast<float>(d[j]);
        ss += x[j] * x[j];
    }
    const float r = 1.f / std::sqrt(ss / static_cast<float>(H) + eps);
    j = 0;
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        const __m512 rv = _mm512_set1_ps(r);
        for (; j + 16 <= H; j += 16)
            tokenmill::store16(o + j, _mm512_mul_ps(_mm512_mul_ps(tokenmill::load16(x + j), rv), tokenmill::load16(w + j)));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    if constexpr (tokenmill::has_vec8<T>) {
        const __m256 rv = _mm256_set1_ps(r);
        for (; j + 8 <= H; j += 8)
            tokenmill::store8(o + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), rv), tokenmill::load8(w + j)));
    }
#endif
    for (; j < H; ++j) o[j] = static_cast<T>(x[j] * r * static_cast<float>(w[j]));
}

template <typename T>
void silu_and_mul_row(const T* g, const T* u, T* o, int64_t I) {
    int64_t j = 0;
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        const __m512 one = _mm512_set1_ps(1.f);
        for (; j + 16 <= I; j += 16) {
            const __m512 gv = tokenmill::load16(g + j);
            const __m512 e = tokenmill::exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));  // e^-g
            tokenmill::store16(o + j, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), tokenmill::load16(u + j)));
        }
    }
#elif defined(__AVX2__) && defined(__FMA__)
    if constexpr (tokenmill::has_vec8<T>) {
        const __m256 one = _mm256_set1_ps(1.f);
        for (; j + 8 <= I; j += 8) {
            const __m256 gv = tokenmill::load8(g + j);
            const __m256 e = tokenmill::exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));  // e^-g
            tokenmill::store8(o + j, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), tokenmill::load8(u + j)));
        }
    }
#endif
    for (; j < I; ++j) {
        const float gv = static_cast<float>(g[j]);
        o[j] = static_cast<T>(gv / (1.f + std::exp(-gv)) * static_cast<float>(u[j]));
    }
}

template <typename T>
void rotate_head(T* x, const float* c, const float* s, int64_t half) {
    T* x2p = x + half;
    int64_t j = 0;
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        for (; j + 16 <= half; j += 16) {
            const __m512 x1 = tokenmill::load16(x + j), x2 = tokenmill::load16(x2p + j);
            const __m512 o1 = _mm512_sub_ps(_mm512_mul_ps(x1, _mm512_loadu_ps(c + j)),
                                            _mm512_mul_ps(x2, _mm512_loadu_ps(s + j)));
            const __m512 o2 = _mm512_add_ps(_mm512_mul_ps(x2, _mm512_loadu_ps(c + half + j)),
                                            _mm512_mul_ps(x1, _mm512_loadu_ps(s + half + j)));
            tokenmill::store16(x + j, o1);
            tokenmill::store16(x2p + j, o2);
        }
    }
#endif
    for (; j < half; ++j) {
        const float x1 = static_cast<float>(x[j]), x2 = static_cast<float>(x2p[j]);
        x[j] = static_cast<T>(x1 * c[j] - x2 * s[j]);
        x2p[j] = static_cast<T>(x2 * c[half + j] + x1 * s[half + j]);
    }
}

// Folds W lanes' (largest value, first index, count) into the row's: the largest
// value; among equal ones, the lowest index, their counts summed.
template <int W>
void merge_lanes(const float* vals, const int32_t* ids, const int32_t* counts, float& best, int64_t& best_i,
                 int64_t& count) {
    for (int l = 0; l < W; ++l) {
        if (counts[l] == 0) continue;  // the lane saw only -inf or NaN
        if (vals[l] > best || count == 0) {
            best = vals[l];
            best_i = ids[l];
            count = counts[l];
        } else if (vals[l] == best) {
            best_i = std::min<int64_t>(best_i, ids[l]);
            count += counts[l];
        }
    }
}

// (first index of the row's max, how many columns hold that max).
template <typename T>
std::pair<int64_t, int64_t> argmax_row(const T* x, int64_t V) {
    float best = -std::numeric_limits<float>::infinity();
    int64_t best_i = 0, count = 0;
    int64_t j = 0;
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        // Per lane: its largest value so far, where it was first seen (strict >, so a
        // NaN never enters and a later equal value never moves it) and how often.
        __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        __m512i mi = _mm512_setzero_si512(), mc = _mm512_setzero_si512();
        __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i step = _mm512_set1_epi32(16), one = _mm512_set1_epi32(1);
        for (; j + 16 <= V; j += 16, idx = _mm512_add_epi32(idx, step)) {
            const __m512 v = tokenmill::load16(x + j);
            const __mmask16 gt = _mm512_cmp_ps_mask(v, mv, _CMP_GT_OQ);
            const __mmask16 eq = _mm512_cmp_ps_mask(v, mv, _CMP_EQ_OQ);
            mv = _mm512_mask_mov_ps(mv, gt, v);
            mi = _mm512_mask_mov_epi32(mi, gt, idx);
            mc = _mm512_mask_mov_epi32(_mm512_mask_add_epi32(mc, eq, mc, one), gt, one);
        }
        alignas(64) float vals[16];
        alignas(64) int32_t ids[16], counts[16];
        _mm512_store_ps(vals, mv);
        _mm512_store_si512(ids, mi);
        _mm512_store_si512(counts, mc);
        merge_lanes<16>(vals, ids, counts, best, best_i, count);
    }
#elif defined(__AVX2__) && defined(__FMA__)
    if constexpr (tokenmill::has_vec8<T>) {
        // The AVX-512 loop above with compare masks as all-ones lanes: subtracting
        // one (-1) counts an equal value, a blend takes the greater one.
        __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
        __m256i mi = _mm256_setzero_si256(), mc = _mm256_setzero_si256();
        __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i step = _mm256_set1_epi32(8), one = _mm256_set1_epi32(1);
        for (; j + 8 <= V; j += 8, idx = _mm256_add_epi32(idx, step)) {
            const __m256 v = tokenmill::load8(x + j);
            const __m256i gt = _mm256_castps_si256(_mm256_cmp_ps(v, mv, _CMP_GT_OQ));
            const __m256i eq = _mm256_castps_si256(_mm256_cmp_ps(v, mv, _CMP_EQ_OQ));
            mv = _mm256_blendv_ps(mv, v, _mm256_castsi256_ps(gt));
            mi = _mm256_blendv_epi8(mi, idx, gt);
            mc = _mm256_blendv_epi8(_mm256_sub_epi32(mc, eq), one, gt);
        }
        alignas(32) float vals[8];
        alignas(32) int32_t ids[8], counts[8];
        _mm256_store_ps(vals, mv);
        _mm256_store_si256(reinterpret_cast<__m256i*>(ids), mi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(counts), mc);
        merge_lanes<8>(vals, ids, counts, best, best_i, count);
    }
#endif
    for (; j < V; ++j) {  // the tail lies past every vector index: strict > keeps the first max
        const float v = static_cast<float>(x[j]);
        if (v > best || (count == 0 && v == best)) {
            best = v;
            best_i = j;
            count = 1;
        } else if (v == best) {
            ++count;
        }
    }
    return {best_i, count};
}

void check_cpu(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
}

}  // namespace

torch::Tensor tokenmill::add_rms_norm(torch::Tensor residual, std::optional<torch::Tensor> delta,
                                      torch::Tensor weight, double eps) {
    check_cpu(residual, "residual");
    check_cpu(weight, "weight");
    TORCH_CHECK(residual.dim() == 2 && residual.scalar_type() == torch::kFloat && residual.is_contiguous(),
                "residual must be a contiguous float32 [T, H] tensor");
    const int64_t T = residual.size(0), H = residual.size(1);
    TORCH_CHECK(weight.dim() == 1 && weight.size(0) == H, "weight must be [H] with H = residual.size(1)");
    weight = weight.contiguous();
    if (delta) {
        check_cpu(*delta, "delta");
        TORCH_CHECK(delta->sizes() == residual.sizes(), "delta must have the residual's shape");
        TORCH_CHECK(delta->scalar_type() == weight.scalar_type(), "delta must have the weight's dtype");
        delta = delta->contiguous();
    }
    auto out = torch::empty({T, H}, residual.options().dtype(weight.scalar_type()));
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::BFloat16, at::ScalarType::Half, weight.scalar_type(),
                                    "add_rms_norm", [&] {
        float* x = residual.data_ptr<float>();
        const scalar_t* d = delta ? delta->data_ptr<scalar_t>() : nullptr;
        const scalar_t* w = weight.data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        at::parallel_for(0, T, kRowsPerTask, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i)
                add_rms_norm_row<scalar_t>(x + i * H, d ? d + i * H : nullptr, w, o + i * H, H, static_cast<float>(eps));
        });
    });
    return out;
}

torch::Tensor tokenmill::silu_and_mul(torch::Tensor gate_up) {
    check_cpu(gate_up, "gate_up");
    TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "gate_up must be [T, 2I]");
    gate_up = gate_up.contiguous();
    const int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
    auto out = torch::empty({T, I}, gate_up.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::BFloat16, at::ScalarType::Half, gate_up.scalar_type(),
                                    "silu_and_mul", [&] {
        const scalar_t* gu = gate_up.data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        at::parallel_for(0, T, kRowsPerTask, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) silu_and_mul_row<scalar_t>(gu + i * 2 * I, gu + i * 2 * I + I, o + i * I, I);
        });
    });
    return out;
}

torch::Tensor tokenmill::rotary_embedding(torch::Tensor x, torch::Tensor cos, torch::Tensor sin) {
    check_cpu(x, "x");
    check_cpu(cos, "cos");
    check_cpu(sin, "sin");
    TORCH_CHECK(x.dim() == 3, "x must be [T, heads, D]");
    const int64_t T = x.size(0), heads = x.size(1), D = x.size(2);
    TORCH_CHECK(D % 2 == 0, "head_dim must be even");
    TORCH_CHECK(x.stride(2) == 1 && x.stride(1) == D, "x's heads and head_dim must be dense (rows may be strided)");
    TORCH_CHECK(cos.scalar_type() == torch::kFloat && sin.scalar_type() == torch::kFloat, "cos/sin must be float32");
    TORCH_CHECK(cos.dim() == 2 && cos.size(0) == T && cos.size(1) == D && sin.sizes() == cos.sizes(),
                "cos/sin must be [T, D]");
    cos = cos.contiguous();
    sin = sin.contiguous();
    const int64_t row_stride = x.stride(0);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::BFloat16, at::ScalarType::Half, x.scalar_type(),
                                    "rotary_embedding", [&] {
        scalar_t* base = x.data_ptr<scalar_t>();
        const float* c = cos.data_ptr<float>();
        const float* s = sin.data_ptr<float>();
        at::parallel_for(0, T, kRowsPerTask, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t)
                for (int64_t h = 0; h < heads; ++h)
                    rotate_head<scalar_t>(base + t * row_stride + h * D, c + t * D, s + t * D, D / 2);
        });
    });
    return x;
}

std::tuple<torch::Tensor, torch::Tensor> tokenmill::argmax_rows(torch::Tensor x) {
    check_cpu(x, "x");
    TORCH_CHECK(x.dim() == 2 && x.size(1) >= 1, "x must be [R, V] with V >= 1");
    TORCH_CHECK(x.size(1) < (int64_t(1) << 31), "V must fit in int32");
    TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16 ||
                x.scalar_type() == torch::kHalf, "x must be float32, bfloat16 or float16");
    if (x.stride(1) != 1) x = x.contiguous();
    const int64_t R = x.size(0), V = x.size(1), row_stride = x.stride(0);
    auto index = torch::empty({R}, x.options().dtype(torch::kLong));
    auto ties = torch::empty({R}, x.options().dtype(torch::kLong));
    int64_t* o = index.data_ptr<int64_t>();
    int64_t* n = ties.data_ptr<int64_t>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::BFloat16, at::ScalarType::Half, x.scalar_type(), "argmax_rows", [&] {
        const scalar_t* base = x.data_ptr<scalar_t>();
        at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) std::tie(o[r], n[r]) = argmax_row<scalar_t>(base + r * row_stride, V);
        });
    });
    return {index, ties};
}
