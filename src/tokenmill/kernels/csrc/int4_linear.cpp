// int4 linear for small batches on CPU: y [M, N] = x [M, K] @ W^T + bias, W in
// groups of 32 input channels, w = code * scale + offset per (group, output column), code in
// 0..15 (kernels/int4_linear.py quantizes and packs; offset = zero - 8 * scale there).
//
// Why: a decode step of 1-4 rows reads every weight once, so its time is weight bytes over
// memory bandwidth; torch's _weight_int4pack_mm_for_cpu measured no faster than the bf16
// panels at batch 1 on an AVX-512 Xeon without BF16 (docs/PERFORMANCE.md). Here the codes
// are widened in registers, like the bf16 pairs of invariant_linear.cpp, and the scale and
// offset are applied once per group, not per weight:
//   y[r, n] = sum_g scale[g, n] * (sum_{k in g} code[k, n] * x[r, k]) + offset[g, n] * xsum[r, g]
// with xsum[r, g] = sum_{k in g} x[r, k], computed once per call.
//
// Layout (int4_pack in kernels/int4_linear.py): packed int32 [P][K / 8][16], P = ceil(N / 16)
// panels of 16 output columns; lane l of word j holds column 16p + l's codes for
// k = 8j .. 8j + 7, k = 8j + t in bits 4t .. 4t + 3. scales, offsets: float32 [P][K / 32][16].
// Columns past N hold zero codes, scales and offsets, and are never stored.
//
// Two arithmetic paths, chosen per call (int8_activations); int4_linear_isa() says which
// this build has:
// - int8 activations (builds with AVX512-VNNI): each row's x is quantized per group of 32 to int8
//   (scale = max |x| / 127, rounded to nearest), and vpdpbusd multiplies 4 codes by 4
//   int8 activations and adds them into an int32 lane: one instruction per 64 products,
//   where the float path spends a shift, a table permute and an FMA per 16. The group's integer sum is exact;
//   y += scale * x_scale * sum + offset * xsum, xsum from the float32 x. This is the
//   int4 x int8 dot product llama.cpp runs for its Q4 formats on CPU; the activation
//   rounding adds an error of at most half an x_scale per activation.
// - float activations (AVX-512; portable loops elsewhere): codes widened to float32 in
//   registers and multiplied by the float32 x.
// Either way each output element is one fixed sequence of operations (k ascending within
// a group, groups ascending), whatever M is and however threads split the panels: the
// kernel is batch-invariant like invariant_linear.
#include "ops.h"

#include <ATen/Parallel.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int64_t kLanes = 16;  // output columns per panel
constexpr int64_t kGroup = 32;  // input channels per scale/offset group
constexpr int64_t kWordK = 8;   // codes per int32 word
constexpr int kMaxRows = 4;     // rows per tile (calls of 5+ rows use int4's bf16 copy when kept)
constexpr int kMaxPanels = 2;

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define TOKENMILL_INT4_VNNI 1
#else
#define TOKENMILL_INT4_VNNI 0
#endif

// The call's activations, prepared once for every tile. Row-major over the M rows.
struct Activations {
    int64_t K = 0, G = 0;
    std::vector<float> x;     // [M][K] float32 (the float path)
    std::vector<float> xsum;  // [M][G] sum of each group's float32 x
    // int8-activations path: per word j, the int8 x of k = 8j, 8j + 2, 8j + 4, 8j + 6 (even)
    // and of k = 8j + 1, .., 8j + 7 (odd), four bytes each, in the byte order of the codes
    // that (word & 0x0F0F0F0F) and ((word >> 4) & 0x0F0F0F0F) leave in a lane.
    std::vector<int32_t> even, odd;  // [M][K / 8]
    std::vector<float> xscale;       // [M][G]
};

template <typename T>
Activations prepare(const T* x, int64_t M, int64_t K, bool int8_activations) {
    Activations a;
    a.K = K;
    a.G = K / kGroup;
    a.x.resize(M * K);
    a.xsum.resize(M * a.G);
    for (int64_t i = 0; i < M * K; ++i) a.x[i] = static_cast<float>(x[i]);
    for (int64_t r = 0; r < M; ++r)
        for (int64_t g = 0; g < a.G; ++g) {
            float sum = 0.f;
            for (int64_t k = g * kGroup; k < (g + 1) * kGroup; ++k) sum += a.x[r * K + k];
            a.xsum[r * a.G + g] = sum;
        }
    if (!int8_activations) return a;
    a.even.resize(M * K / kWordK);
    a.odd.resize(M * K / kWordK);
    a.xscale.resize(M * a.G);
    for (int64_t r = 0; r < M; ++r)
        for (int64_t g = 0; g < a.G; ++g) {
            const float* xg = a.x.data() + r * K + g * kGroup;
            float amax = 0.f;
            for (int64_t k = 0; k < kGroup; ++k) amax = std::max(amax, std::fabs(xg[k]));
            const float scale = amax > 0.f ? amax / 127.f : 1.f;
            a.xscale[r * a.G + g] = scale;
            int8_t q[kGroup];
            for (int64_t k = 0; k < kGroup; ++k)
                q[k] = static_cast<int8_t>(std::max(-127.f, std::min(127.f, std::nearbyint(xg[k] / scale))));
            for (int64_t w = 0; w < kGroup / kWordK; ++w) {
                const int8_t* qw = q + w * kWordK;
                const int8_t e[4] = {qw[0], qw[2], qw[4], qw[6]}, o[4] = {qw[1], qw[3], qw[5], qw[7]};
                const int64_t j = r * (K / kWordK) + g * (kGroup / kWordK) + w;
                std::memcpy(&a.even[j], e, 4);
                std::memcpy(&a.odd[j], o, 4);
            }
        }
    return a;
}

// Portable reference of the float path (builds without AVX-512; tests compare every path
// against a dequantized float64 product).
void tile_portable(const Activations& a, int64_t m0, const int32_t* packed, const float* scales,
                   const float* offsets, int64_t panel_words, int64_t panel_groups, int rows, int npanels,
                   float* out /* [rows][npanels][16] */) {
    const int64_t K = a.K, G = a.G;
    for (int r = 0; r < rows; ++r)
        for (int p = 0; p < npanels; ++p)
            for (int64_t l = 0; l < kLanes; ++l) {
                float y = 0.f;
                for (int64_t g = 0; g < G; ++g) {
                    float a_even = 0.f, a_odd = 0.f;
                    for (int64_t k = g * kGroup; k < (g + 1) * kGroup; ++k) {
                        const uint32_t word = static_cast<uint32_t>(packed[p * panel_words + (k / kWordK) * kLanes + l]);
                        const float code = static_cast<float>((word >> (4 * (k % kWordK))) & 0xF);
                        (k % 2 == 0 ? a_even : a_odd) += code * a.x[(m0 + r) * K + k];
                    }
                    const int64_t s = p * panel_groups + g * kLanes + l;
                    y += scales[s] * (a_even + a_odd);
                    y += offsets[s] * a.xsum[(m0 + r) * G + g];
                }
                out[(r * npanels + p) * kLanes + l] = y;
            }
}

#if defined(__AVX512F__)

// Float path, R rows x P panels. Per group: 4 words per panel, each widened 8 times (a
// shift and a table permute) and shared by the R rows; two accumulators per (row, panel),
// even and odd k, for two independent FMA chains; then y += scale * (even + odd) + offset * xsum.
template <int R, int P>
void tile_float(const Activations& a, int64_t m0, const int32_t* packed, const float* scales,
                const float* offsets, int64_t panel_words, int64_t panel_groups, float* out) {
    const int64_t K = a.K, G = a.G;
    const float* x = a.x.data() + m0 * K;
    // vpermps reads only the low 4 bits of each index lane: permuting this table by the
    // (shifted) word gives each lane's nibble as a float, no mask and no conversion.
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 y[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r][p] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
        __m512 even[R][P], odd[R][P];
        for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) even[r][p] = odd[r][p] = _mm512_setzero_ps();
        for (int64_t j = g * (kGroup / kWordK); j < (g + 1) * (kGroup / kWordK); ++j) {
            __m512i w[P];
            for (int p = 0; p < P; ++p) w[p] = _mm512_loadu_si512(packed + p * panel_words + j * kLanes);
            const int64_t k0 = j * kWordK;
#pragma GCC unroll 4
            for (int t = 0; t < 8; t += 2) {
                __m512 c0[P], c1[P];
                for (int p = 0; p < P; ++p) {
                    c0[p] = _mm512_permutexvar_ps(_mm512_srli_epi32(w[p], 4 * t), codes);
                    c1[p] = _mm512_permutexvar_ps(_mm512_srli_epi32(w[p], 4 * t + 4), codes);
                }
                for (int r = 0; r < R; ++r) {
                    const __m512 x0 = _mm512_set1_ps(x[r * K + k0 + t]), x1 = _mm512_set1_ps(x[r * K + k0 + t + 1]);
                    for (int p = 0; p < P; ++p) {
                        even[r][p] = _mm512_fmadd_ps(x0, c0[p], even[r][p]);
                        odd[r][p] = _mm512_fmadd_ps(x1, c1[p], odd[r][p]);
                    }
                }
            }
        }
        for (int p = 0; p < P; ++p) {
            const __m512 s = _mm512_loadu_ps(scales + p * panel_groups + g * kLanes);
            const __m512 o = _mm512_loadu_ps(offsets + p * panel_groups + g * kLanes);
            for (int r = 0; r < R; ++r) {
                y[r][p] = _mm512_fmadd_ps(s, _mm512_add_ps(even[r][p], odd[r][p]), y[r][p]);
                y[r][p] = _mm512_fmadd_ps(o, _mm512_set1_ps(a.xsum[(m0 + r) * G + g]), y[r][p]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + (r * P + p) * kLanes, y[r][p]);
}
#endif

#if TOKENMILL_INT4_VNNI
// int8-activations path, R rows x P panels. Per word and panel: the low nibbles of its
// bytes (k = 8j, +2, +4, +6) by one mask, the high ones (k odd) by a shift and a mask; one
// vpdpbusd each against the row's matching four int8 activations, both into one int32
// accumulator per (row, panel) (R x P independent chains hide vpdpbusd's latency; two per
// pair spilled registers at R = 4). Per group: the exact int32 sum times scale * x_scale,
// plus offset * xsum.
template <int R, int P>
void tile_vnni(const Activations& a, int64_t m0, const int32_t* packed, const float* scales,
               const float* offsets, int64_t panel_words, int64_t panel_groups, float* out) {
    const int64_t G = a.G, W = a.K / kWordK;
    const __m512i low4 = _mm512_set1_epi32(0x0F0F0F0F);
    const int32_t* xe[R];
    const int32_t* xo[R];
    for (int r = 0; r < R; ++r) {
        xe[r] = a.even.data() + (m0 + r) * W;
        xo[r] = a.odd.data() + (m0 + r) * W;
    }
    __m512 y[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r][p] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
        __m512i acc[R][P];
        for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_si512();
        for (int64_t j = g * (kGroup / kWordK); j < (g + 1) * (kGroup / kWordK); ++j) {
            __m512i lo[P], hi[P];
            for (int p = 0; p < P; ++p) {
                const __m512i w = _mm512_loadu_si512(packed + p * panel_words + j * kLanes);
                lo[p] = _mm512_and_si512(w, low4);
                hi[p] = _mm512_and_si512(_mm512_srli_epi32(w, 4), low4);
            }
            for (int r = 0; r < R; ++r) {
                const __m512i e = _mm512_set1_epi32(xe[r][j]), o = _mm512_set1_epi32(xo[r][j]);
                for (int p = 0; p < P; ++p)
                    acc[r][p] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[r][p], lo[p], e), hi[p], o);
            }
        }
        for (int p = 0; p < P; ++p) {
            const __m512 s = _mm512_loadu_ps(scales + p * panel_groups + g * kLanes);
            const __m512 o = _mm512_loadu_ps(offsets + p * panel_groups + g * kLanes);
            for (int r = 0; r < R; ++r) {
                const __m512 sx = _mm512_mul_ps(s, _mm512_set1_ps(a.xscale[(m0 + r) * G + g]));
                y[r][p] = _mm512_fmadd_ps(sx, _mm512_cvtepi32_ps(acc[r][p]), y[r][p]);
                y[r][p] = _mm512_fmadd_ps(o, _mm512_set1_ps(a.xsum[(m0 + r) * G + g]), y[r][p]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + (r * P + p) * kLanes, y[r][p]);
}
#endif

#if defined(__AVX512F__)
// Activations prepared with int8 values (a.even non-empty) take the int8 path.
template <int R = 1>
void tile_dispatch(int rows, int npanels, const Activations& a, int64_t m0, const int32_t* packed,
                   const float* scales, const float* offsets, int64_t panel_words, int64_t panel_groups, float* out) {
    if constexpr (R <= kMaxRows) {
        if (rows == R) {
#if TOKENMILL_INT4_VNNI
            if (!a.even.empty()) {
                if (npanels == 2)
                    return tile_vnni<R, 2>(a, m0, packed, scales, offsets, panel_words, panel_groups, out);
                return tile_vnni<R, 1>(a, m0, packed, scales, offsets, panel_words, panel_groups, out);
            }
#endif
            if (npanels == 2) return tile_float<R, 2>(a, m0, packed, scales, offsets, panel_words, panel_groups, out);
            return tile_float<R, 1>(a, m0, packed, scales, offsets, panel_words, panel_groups, out);
        }
        return tile_dispatch<R + 1>(rows, npanels, a, m0, packed, scales, offsets, panel_words, panel_groups, out);
    }
}
#endif

void tile(int rows, int npanels, const Activations& a, int64_t m0, const int32_t* packed, const float* scales,
          const float* offsets, int64_t panel_words, int64_t panel_groups, float* out) {
#if defined(__AVX512F__)
    tile_dispatch(rows, npanels, a, m0, packed, scales, offsets, panel_words, panel_groups, out);
#else
    tile_portable(a, m0, packed, scales, offsets, panel_words, panel_groups, rows, npanels, out);
#endif
}

template <typename T>
void store_rows(const float* acc, int rows, int np, int64_t p0, int64_t N, const float* bias, T* dst_rows) {
    for (int r = 0; r < rows; ++r)
        for (int p = 0; p < np; ++p) {
            const int64_t n0 = (p0 + p) * kLanes, n_end = std::min<int64_t>(n0 + kLanes, N);
            const float* a = acc + (r * np + p) * kLanes;
            T* dst = dst_rows + r * N;
            for (int64_t n = n0; n < n_end; ++n) dst[n] = static_cast<T>(bias ? a[n - n0] + bias[n] : a[n - n0]);
        }
}

}  // namespace

namespace tokenmill {

std::string int4_linear_isa() {
#if TOKENMILL_INT4_VNNI
    return "avx512-vnni";
#elif defined(__AVX512F__)
    return "avx512";
#else
    return "portable";
#endif
}

torch::Tensor int4_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scales, torch::Tensor offsets,
                          int64_t N, std::optional<torch::Tensor> bias, bool int8_activations) {
    TORCH_CHECK(!int8_activations || TOKENMILL_INT4_VNNI, "int4_linear: int8 activations need AVX512-VNNI");
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "int4_linear: x must be contiguous [M, K]");
    TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16,
                "int4_linear: x must be float32 or bfloat16");
    TORCH_CHECK(packed.scalar_type() == torch::kInt && packed.dim() == 3 && packed.size(2) == kLanes &&
                    packed.is_contiguous(),
                "int4_linear: packed must be contiguous int32 [P, K/8, 16]");
    const int64_t M = x.size(0), K = x.size(1), P = packed.size(0), G = K / kGroup;
    TORCH_CHECK(K % kGroup == 0 && packed.size(1) * kWordK == K, "int4_linear: K must be a multiple of 32 and match");
    TORCH_CHECK(P * kLanes >= N && (P - 1) * kLanes < N, "int4_linear: packed has ", P, " panels for N = ", N);
    for (const auto* t : {&scales, &offsets})
        TORCH_CHECK(t->scalar_type() == torch::kFloat && t->is_contiguous() && t->dim() == 3 && t->size(0) == P &&
                        t->size(1) == G && t->size(2) == kLanes,
                    "int4_linear: scales and offsets must be contiguous float32 [P, K/32, 16]");
    const float* b = nullptr;
    torch::Tensor bias_f;
    if (bias.has_value() && bias->defined()) {
        TORCH_CHECK(bias->numel() == N, "int4_linear: bias must have N elements");
        bias_f = bias->to(torch::kFloat).contiguous();
        b = bias_f.data_ptr<float>();
    }
    const Activations a = x.scalar_type() == torch::kFloat
                              ? prepare(x.data_ptr<float>(), M, K, int8_activations)
                              : prepare(x.data_ptr<c10::BFloat16>(), M, K, int8_activations);
    auto out = torch::empty({M, N}, x.options());
    const int32_t* w = packed.data_ptr<int32_t>();
    const float* sc = scales.data_ptr<float>();
    const float* of = offsets.data_ptr<float>();
    const int64_t panel_words = (K / kWordK) * kLanes, panel_groups = G * kLanes;
    const int64_t pairs = (P + kMaxPanels - 1) / kMaxPanels;
    at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
        alignas(64) float acc[kMaxRows * kMaxPanels * kLanes];
        for (int64_t q = begin; q < end; ++q) {
            const int64_t p0 = q * kMaxPanels;
            const int np = static_cast<int>(std::min<int64_t>(kMaxPanels, P - p0));
            for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
                tile(rows, np, a, m0, w + p0 * panel_words, sc + p0 * panel_groups, of + p0 * panel_groups,
                     panel_words, panel_groups, acc);
                if (out.scalar_type() == torch::kFloat)
                    store_rows(acc, rows, np, p0, N, b, out.data_ptr<float>() + m0 * N);
                else
                    store_rows(acc, rows, np, p0, N, b, out.data_ptr<c10::BFloat16>() + m0 * N);
            }
        }
    });
    return out;
}

}  // namespace tokenmill
