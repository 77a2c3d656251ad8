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
// Layout (int4_pack in kernels/int4_linear.py): int32 [B][G][NP * 80], G = K / 32 groups,
// blocks of NP panels (NP = 1..4, chosen at packing time) of 16 output columns: block b holds
// columns 16 NP b .. 16 NP (b + 1) - 1. Per (block, group), one contiguous run, so each thread
// reads one sequential stream, where the previous layout gave it six strided ones (with the
// prefetch below: 1.04-1.27x faster over a model's layers read from memory, docs/PERFORMANCE.md):
//   words   [4][NP][16]: lane l of word jj, panel p holds column 16 (NP b + p) + l's codes for
//                        k = 32 g + 8 jj + t in bits 4t .. 4t + 3;
//   scales  [NP][16], zeros [NP][16]: bf16, two to an int32 (the compute dtype's grid, to which
//                        the packer rounds them anyway); the kernel widens them to float32 and
//                        forms offset = zero - 8 * scale in float32, the value the packer stored
//                        as float32 when these were float32 words (4 bytes per 32 weights less:
//                        a sixth of the bytes a decode step reads, the results unchanged bit for bit).
// Columns past N (padding up to a whole block) hold zero codes, scales and zeros, and are
// never stored.
//
// Two arithmetic paths, chosen per call (int8_activations); int4_linear_isa() says which
// this build has:
// - int8 activations (builds with AVX512-VNNI or AVX2): each row's x is quantized per group of 32
//   to int8 (scale = max |x| / 127, rounded to nearest), and vpdpbusd multiplies 4 codes by 4
//   int8 activations and adds them into an int32 lane: one instruction per 64 products,
//   where the float path spends a shift, a table permute and an FMA per 16 (AVX2: vpmaddubsw
//   and int16 adds per 32 products, one vpmaddwd per group). The group's integer sum is exact,
//   the same on either ISA; y += scale * x_scale * sum + offset * xsum, xsum from the float32 x.
//   This is the int4 x int8 dot product llama.cpp runs for its Q4 formats on CPU; the activation
//   rounding adds an error of at most half an x_scale per activation.
// - float activations (AVX-512 and AVX2 + FMA; portable loops elsewhere): codes widened to
//   float32 in registers and multiplied by the float32 x. AVX2 (int4_tiles_avx2.h) takes tiles
//   of up to 4 rows whatever the panels, widening each group's codes once into a buffer in L1.
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
constexpr int kMaxPanels = 4;   // panels per block
constexpr int64_t kGroupWords = kGroup / kWordK;  // 4 words per lane per group
// Software prefetch distance, in groups of the block's stream (3 groups of 4 panels: 3.75 KB; 1, 6
// and 12 groups measured no better in an ad hoc A/B, with float32 scales then). Prefetches past the
// end of the tensor are harmless hints.
constexpr int64_t kPrefetchGroups = 3;

// Per (block, group): 80 int32 per panel (64 code words, then 16 bf16 scales and 16 bf16 zeros).
constexpr int64_t kBlockGroupInts = (kGroupWords + 1) * kLanes;

// Rows per tile: R x NP accumulators (two each in the float path) and the widened codes fit
// the 32 vector registers. Calls of 5+ rows use the layer's dense copy when it keeps one.
constexpr int rows_per_tile(int np) { return np >= 3 ? 1 : 4 / np; }
// Rows per tile of AVX2's float path (tile_float8_rows: codes widened once per tile).
constexpr int kAvx2FloatRows = 4;

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define TOKENMILL_INT4_VNNI 1
#else
#define TOKENMILL_INT4_VNNI 0
#endif
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define TOKENMILL_INT4_AVX2 1
#else
#define TOKENMILL_INT4_AVX2 0
#endif
// Whether this build has an int8-activations path.
constexpr bool kInt8Activations = TOKENMILL_INT4_VNNI || TOKENMILL_INT4_AVX2;

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

// A bf16 bit pattern as float32 (exact).
inline float bf16_to_float(uint16_t bits) {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, 4);
    return f;
}

// Portable reference of the float path (builds without AVX-512; tests compare every path
// against a dequantized float64 product). blk: one block, [G][NP * 80].
void tile_portable(const Activations& a, int64_t m0, const int32_t* blk, int rows, int np,
                   float* out /* [rows][np][16] */) {
    const int64_t K = a.K, G = a.G, stride = np * kBlockGroupInts;
    for (int r = 0; r < rows; ++r)
        for (int p = 0; p < np; ++p)
            for (int64_t l = 0; l < kLanes; ++l) {
                float y = 0.f;
                for (int64_t g = 0; g < G; ++g) {
                    const int32_t* gb = blk + g * stride;
                    float a_even = 0.f, a_odd = 0.f;
                    for (int64_t k = g * kGroup; k < (g + 1) * kGroup; ++k) {
                        const int64_t jj = (k - g * kGroup) / kWordK;
                        const uint32_t word = static_cast<uint32_t>(gb[(jj * np + p) * kLanes + l]);
                        const float code = static_cast<float>((word >> (4 * (k % kWordK))) & 0xF);
                        (k % 2 == 0 ? a_even : a_odd) += code * a.x[(m0 + r) * K + k];
                    }
                    const uint16_t* sz = reinterpret_cast<const uint16_t*>(gb + kGroupWords * np * kLanes);
                    const float scale = bf16_to_float(sz[p * kLanes + l]);
                    const float offset = bf16_to_float(sz[(np + p) * kLanes + l]) - 8.f * scale;
                    y += scale * (a_even + a_odd);
                    y += offset * a.xsum[(m0 + r) * G + g];
                }
                out[(r * np + p) * kLanes + l] = y;
            }
}

#if defined(__AVX512F__) || TOKENMILL_INT4_AVX2
// The group kPrefetchGroups ahead in this block's stream (one cache line per 16 ints).
template <int P>
inline void prefetch_group(const int32_t* gb) {
    const int32_t* ahead = gb + kPrefetchGroups * P * kBlockGroupInts;
    for (int64_t i = 0; i < P * kBlockGroupInts; i += 16) _mm_prefetch(reinterpret_cast<const char*>(ahead + i), _MM_HINT_T0);
}
#endif

#if defined(__AVX512F__)

// Panel p's 16 scales and offsets of one (block, group): the bf16 scales and zeros after the
// P panels' code words, widened to float32; offset = zero - 8 * scale (float32, as the packer
// formed it before the zeros were stored as bf16).
template <int P>
inline void scales_offsets(const int32_t* gb, int p, __m512& scale, __m512& offset) {
    const uint16_t* sz = reinterpret_cast<const uint16_t*>(gb + kGroupWords * P * kLanes);
    const auto widen = [](const uint16_t* bits) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    };
    scale = widen(sz + p * kLanes);
    offset = _mm512_sub_ps(widen(sz + (P + p) * kLanes), _mm512_mul_ps(_mm512_set1_ps(8.f), scale));
}

// Float path, R rows x P panels of one block. Per group: 4 words per panel, each widened 8
// times (a shift and a table permute) and shared by the R rows; two accumulators per (row,
// panel), even and odd k, for independent FMA chains; then y += scale * (even + odd) + offset * xsum.
template <int R, int P>
void tile_float(const Activations& a, int64_t m0, const int32_t* blk, float* out) {
    const int64_t K = a.K, G = a.G;
    const float* x = a.x.data() + m0 * K;
    // vpermps reads only the low 4 bits of each index lane: permuting this table by the
    // (shifted) word gives each lane's nibble as a float, no mask and no conversion.
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 y[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r][p] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
        const int32_t* gb = blk + g * P * kBlockGroupInts;
        prefetch_group<P>(gb);
        __m512 even[R][P], odd[R][P];
        for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) even[r][p] = odd[r][p] = _mm512_setzero_ps();
        for (int64_t jj = 0; jj < kGroupWords; ++jj) {
            __m512i w[P];
            for (int p = 0; p < P; ++p) w[p] = _mm512_loadu_si512(gb + (jj * P + p) * kLanes);
            const int64_t k0 = g * kGroup + jj * kWordK;
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
            __m512 s, o;
            scales_offsets<P>(gb, p, s, o);
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
// int8-activations path, R rows x P panels of one block. Per word and panel: the low nibbles
// of its bytes (k = 8j, +2, +4, +6) by one mask, the high ones (k odd) by a shift and a mask;
// one vpdpbusd each against the row's matching four int8 activations. Accumulators: at one row,
// two per panel (low and high nibbles: 2P independent chains hide vpdpbusd's latency); at more
// rows one per (row, panel), both products chained into it. Integer sums are exact, so the
// split changes no result. Per group: the int32 sum times scale * x_scale, plus offset * xsum.
template <int R, int P>
void tile_vnni(const Activations& a, int64_t m0, const int32_t* blk, float* out) {
    constexpr bool kSplit = R == 1;
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
        const int32_t* gb = blk + g * P * kBlockGroupInts;
        prefetch_group<P>(gb);
        __m512i acc[R][P], acc_hi[P];
        for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_si512();
        for (int p = 0; p < P; ++p) acc_hi[p] = _mm512_setzero_si512();
        for (int64_t jj = 0; jj < kGroupWords; ++jj) {
            const int64_t j = g * kGroupWords + jj;
            __m512i lo[P], hi[P];
            for (int p = 0; p < P; ++p) {
                const __m512i w = _mm512_loadu_si512(gb + (jj * P + p) * kLanes);
                lo[p] = _mm512_and_si512(w, low4);
                hi[p] = _mm512_and_si512(_mm512_srli_epi32(w, 4), low4);
            }
            for (int r = 0; r < R; ++r) {
                const __m512i e = _mm512_set1_epi32(xe[r][j]), o = _mm512_set1_epi32(xo[r][j]);
                for (int p = 0; p < P; ++p) {
                    if constexpr (kSplit) {
                        acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], lo[p], e);
                        acc_hi[p] = _mm512_dpbusd_epi32(acc_hi[p], hi[p], o);
                    } else {
                        acc[r][p] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[r][p], lo[p], e), hi[p], o);
                    }
                }
            }
        }
        if constexpr (kSplit)
            for (int p = 0; p < P; ++p) acc[0][p] = _mm512_add_epi32(acc[0][p], acc_hi[p]);
        for (int p = 0; p < P; ++p) {
            __m512 s, o;
            scales_offsets<P>(gb, p, s, o);
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

#include "int4_tiles_avx2.h"

#if defined(__AVX512F__) || TOKENMILL_INT4_AVX2
// rows <= rows_per_tile(P). Activations prepared with int8 values (a.even non-empty) take the int8 path.
template <int P, int R = 1>
void tile_rows(int rows, const Activations& a, int64_t m0, const int32_t* blk, float* out) {
    if constexpr (R <= rows_per_tile(P)) {
        if (rows == R) {
#if TOKENMILL_INT4_VNNI
            if (!a.even.empty()) return tile_vnni<R, P>(a, m0, blk, out);
#endif
#if TOKENMILL_INT4_AVX2
            if (!a.even.empty()) return tile_int8x8<R, P>(a, m0, blk, out);
            return tile_float8<R, P>(a, m0, blk, out);
#else
            return tile_float<R, P>(a, m0, blk, out);
#endif
        }
        return tile_rows<P, R + 1>(rows, a, m0, blk, out);
    }
}

// One block of P panels: AVX2's float path takes its 2-4 rows in one tile (tile_float8_rows), every
// other path rows <= rows_per_tile(P).
template <int P>
void tile_panels(int rows, const Activations& a, int64_t m0, const int32_t* blk, float* out) {
#if TOKENMILL_INT4_AVX2
    if (rows > 1 && a.even.empty()) return tile_float8_rows<P>(rows, a, m0, blk, out);
#endif
    tile_rows<P>(rows, a, m0, blk, out);
}
#endif

void tile(int rows, int np, const Activations& a, int64_t m0, const int32_t* blk, float* out) {
#if defined(__AVX512F__) || TOKENMILL_INT4_AVX2
    switch (np) {
        case 1: return tile_panels<1>(rows, a, m0, blk, out);
        case 2: return tile_panels<2>(rows, a, m0, blk, out);
        case 3: return tile_panels<3>(rows, a, m0, blk, out);
        default: return tile_panels<4>(rows, a, m0, blk, out);
    }
#else
    tile_portable(a, m0, blk, rows, np, out);
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
#elif TOKENMILL_INT4_AVX2
    return "avx2";
#else
    return "portable";
#endif
}

torch::Tensor int4_linear(torch::Tensor x, torch::Tensor packed, int64_t N, std::optional<torch::Tensor> bias,
                          bool int8_activations) {
    TORCH_CHECK(!int8_activations || kInt8Activations, "int4_linear: int8 activations need AVX512-VNNI or AVX2");
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "int4_linear: x must be contiguous [M, K]");
    TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16,
                "int4_linear: x must be float32 or bfloat16");
    TORCH_CHECK(packed.scalar_type() == torch::kInt && packed.dim() == 3 && packed.is_contiguous() &&
                    packed.size(2) % kBlockGroupInts == 0 && packed.size(2) / kBlockGroupInts >= 1 &&
                    packed.size(2) / kBlockGroupInts <= kMaxPanels,
                "int4_linear: packed must be contiguous int32 [B, K/32, NP * 80], NP in 1..4");
    const int64_t M = x.size(0), K = x.size(1), B = packed.size(0), G = K / kGroup;
    const int np = static_cast<int>(packed.size(2) / kBlockGroupInts);
    const int64_t block_cols = np * kLanes;
    TORCH_CHECK(K % kGroup == 0 && packed.size(1) == G, "int4_linear: K must be a multiple of 32 and match packed");
    TORCH_CHECK(B * block_cols >= N && (B - 1) * block_cols < N, "int4_linear: packed has ", B, " blocks of ",
                block_cols, " columns for N = ", N);
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
    const bool out_float = out.scalar_type() == torch::kFloat;
    float* out_f = out_float ? out.data_ptr<float>() : nullptr;
    c10::BFloat16* out_b = out_float ? nullptr : out.data_ptr<c10::BFloat16>();
    const int32_t* w = packed.data_ptr<int32_t>();
    const int64_t block_ints = G * np * kBlockGroupInts;
    const int rows_tile = TOKENMILL_INT4_AVX2 && !int8_activations ? kAvx2FloatRows : rows_per_tile(np);
    at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
        alignas(64) float acc[kAvx2FloatRows * kMaxPanels * kLanes];  // rows_tile * np <= 16
        for (int64_t blk = begin; blk < end; ++blk) {
            for (int64_t m0 = 0; m0 < M; m0 += rows_tile) {
                const int rows = static_cast<int>(std::min<int64_t>(rows_tile, M - m0));
                tile(rows, np, a, m0, w + blk * block_ints, acc);
                if (out_float)
                    store_rows(acc, rows, np, blk * np, N, b, out_f + m0 * N);
                else
                    store_rows(acc, rows, np, blk * np, N, b, out_b + m0 * N);
            }
        }
    });
    return out;
}

}  // namespace tokenmill
