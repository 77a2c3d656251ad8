// Batch-invariant linear layer for CPU (--deterministic): y [M, N] = x [M, K] @ W^T + bias,
// where each output element is the same float32 sum, in the same order, whatever M is,
// wherever its row sits in the batch, and however the work is split over threads.
//
// Why not torch's matmul: BLAS libraries pick kernels and K-blocking by shape, so a row's
// result changes with the number of rows beside it (measured: docs/PERFORMANCE.md).
//
// How: the weight is packed once into panels of 16 output columns, K-major
// (pack_invariant_weight). The micro-kernel keeps one 16-lane float32 accumulator per
// (row, panel) and walks k from 0 to K in order: acc += broadcast(x[r, k]) * panel[k].
// Lane n of that accumulator is then sum_k x[r, k] * W[n, k] in k order, a sequence that
// depends only on the row and the column; tiles of 1..6 rows and 1..2 panels, M, and the
// thread split only decide which accumulators exist side by side. No horizontal sums.
//
// Layouts (chosen at compile time, the same for every call on this build):
// - float32, and bfloat16 without AVX-512: [P][K][16]: P = ceil(N / 16) panels;
// - bfloat16 with AVX-512: [P2][K2][16][2]: k in pairs. With AVX512-BF16 for vdpbf16ps (and
//   AMX's tdpbf16ps), which add both products of a pair into a float32 lane. Without it
//   one 32-bit lane holds column n's weights for k = 2j (low half) and 2j + 1 (high half),
//   widened to float32 by a shift and a mask: two vector ops per 32 weights instead of
//   a shuffle and a shift per 16 (the shuffle port is the second FMA port on many
//   AVX-512 cores). K2 = ceil(K / 32) * 16 pairs and P2 = P rounded up to even, the
//   padding zeros: AMX reads k in blocks of 32 and columns in tiles of 32; the vector
//   paths read only the pairs they need.
// Columns past N (the last panels' padding) hold zeros and are never stored.
//
// Vectors: AVX-512 (16 lanes, one register per panel), else AVX2 + FMA (two 8-lane halves
// per panel), else plain loops; the build's -march=native decides, once.
//
// bfloat16 on a CPU with AMX (and the kernel allowed to use it) runs on AMX tiles:
// C[16 x 16] += A[16 rows x 32 k] . B[32 k x 16 columns], k blocks in order, so each
// element is again one fixed sequence whatever the rows beside it. AMX or the vector
// path is decided once per process, so a process never mixes the two.
#include "ops.h"
#include "vec.h"

#include <ATen/Parallel.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {

constexpr int64_t kLanes = 16;   // output columns per panel
constexpr int64_t kKBlock = 32;  // k per AMX block; the paired layout pads K to a multiple
constexpr int kMaxRows = 6;      // rows per tile (the widening path: kWidenRows): 6 x 2 panels = 12 accumulators
constexpr int kMaxPanels = 2;

template <typename T>
constexpr bool kPairs =
#if defined(__AVX512F__)
    std::is_same_v<T, c10::BFloat16>;
#else
    false;
#endif

// ---- portable path: the same per-element order, plain loops ---------------------------

template <typename T>
void tile_portable(const T* x, int64_t K, const T* panels, int64_t panel_stride, int rows, int npanels,
                   float* acc /* [rows][npanels][16] */) {
    for (int r = 0; r < rows; ++r)
        for (int p = 0; p < npanels; ++p) {
            float* a = acc + (r * npanels + p) * kLanes;
            const T* w = panels + p * panel_stride;
            for (int64_t l = 0; l < kLanes; ++l) a[l] = 0.f;
            for (int64_t k = 0; k < K; ++k) {
                const float xv = static_cast<float>(x[r * K + k]);
                for (int64_t l = 0; l < kLanes; ++l) a[l] += xv * static_cast<float>(w[k * kLanes + l]);
            }
        }
}

#if defined(__AVX512F__)

// R rows x P panels, flat layout [K][16] per panel.
template <typename T, int R, int P>
void tile_flat(const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
    __m512 a[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) a[r][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
        __m512 w[P];
        for (int p = 0; p < P; ++p) w[p] = tokenmill::load16(panels + p * panel_stride + k * kLanes);
        for (int r = 0; r < R; ++r) {
            const __m512 xv = _mm512_set1_ps(static_cast<float>(x[r * K + k]));
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_fmadd_ps(xv, w[p], a[r][p]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(acc + (r * P + p) * kLanes, a[r][p]);
}

#if defined(__AVX512BF16__)
// R rows x P panels, paired bf16 layout [K2][16][2] per panel.
template <int R, int P>
void tile_pairs(const c10::BFloat16* x, int64_t K, const c10::BFloat16* panels, int64_t panel_stride, float* acc) {
    __m512 a[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) a[r][p] = _mm512_setzero_ps();
    const int64_t full = K / 2;
    for (int64_t j = 0; j < full; ++j) {
        __m512bh w[P];
        for (int p = 0; p < P; ++p)
            w[p] = (__m512bh)_mm512_loadu_si512(panels + p * panel_stride + j * 2 * kLanes);
        for (int r = 0; r < R; ++r) {
            int32_t pair;  // x[r, 2j] and x[r, 2j + 1], broadcast to every lane
            std::memcpy(&pair, x + r * K + 2 * j, sizeof(pair));
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_dpbf16_ps(a[r][p], xv, w[p]);
        }
    }
    if (K % 2) {  // the last k alone, paired with a zero (its weight pair's second half is zero too)
        __m512bh w[P];
        for (int p = 0; p < P; ++p)
            w[p] = (__m512bh)_mm512_loadu_si512(panels + p * panel_stride + full * 2 * kLanes);
        for (int r = 0; r < R; ++r) {
            const c10::BFloat16 two[2] = {x[r * K + K - 1], c10::BFloat16(0.f)};
            int32_t pair;
            std::memcpy(&pair, two, sizeof(pair));
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_dpbf16_ps(a[r][p], xv, w[p]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(acc + (r * P + p) * kLanes, a[r][p]);
}
#endif

#if !defined(__AVX512BF16__)
// R rows x P panels, paired bf16 layout [K2][16][2] per panel, float32 rows (x converted
// once per call, so each broadcast is a plain float load): per k pair, one load per
// panel gives both k's, k = 2j by a 16-bit left shift, k = 2j + 1 by masking the low
// half. Each accumulator still takes one FMA per k, k ascending (the flat order).
template <int R, int P>
void tile_pairs_widen(const float* x, int64_t K, const c10::BFloat16* panels, int64_t panel_stride, float* acc) {
    __m512 a[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) a[r][p] = _mm512_setzero_ps();
    const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    const int64_t full = K / 2;
    for (int64_t j = 0; j < full; ++j) {
        __m512 even[P], odd[P];
        for (int p = 0; p < P; ++p) {
            const __m512i w = _mm512_loadu_si512(panels + p * panel_stride + j * 2 * kLanes);
            even[p] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            odd[p] = _mm512_castsi512_ps(_mm512_and_si512(w, high_half));
        }
        for (int r = 0; r < R; ++r) {
            const __m512 x0 = _mm512_set1_ps(x[r * K + 2 * j]), x1 = _mm512_set1_ps(x[r * K + 2 * j + 1]);
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_fmadd_ps(x1, odd[p], _mm512_fmadd_ps(x0, even[p], a[r][p]));
        }
    }
    if (K % 2) {  // the last k alone: the low halves of its pair
        __m512 even[P];
        for (int p = 0; p < P; ++p)
            even[p] = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_loadu_si512(panels + p * panel_stride + full * 2 * kLanes), 16));
        for (int r = 0; r < R; ++r) {
            const __m512 x0 = _mm512_set1_ps(x[r * K + K - 1]);
            for (int p = 0; p < P; ++p) a[r][p] = _mm512_fmadd_ps(x0, even[p], a[r][p]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) _mm512_storeu_ps(acc + (r * P + p) * kLanes, a[r][p]);
}

// Rows per widening tile: the shift and mask per panel and k pair are shared by
// every row of the tile, so taller tiles spend less of the FMA ports on them
// (8 x 2 panels: 16 accumulators, 4 widened weights, 2 broadcasts of 32 registers;
// measured 7-35% faster per call than 6 rows at 64-1024 rows, docs/PERFORMANCE.md).
constexpr int kWidenRows = 8;

template <int R = 1>
void tile_dispatch_widen(int rows, int npanels, const float* x, int64_t K, const c10::BFloat16* panels,
                         int64_t panel_stride, float* acc) {
    if constexpr (R <= kWidenRows) {
        if (rows == R) {
            if (npanels == 2) return tile_pairs_widen<R, 2>(x, K, panels, panel_stride, acc);
            return tile_pairs_widen<R, 1>(x, K, panels, panel_stride, acc);
        }
        return tile_dispatch_widen<R + 1>(rows, npanels, x, K, panels, panel_stride, acc);
    }
}
#define TOKENMILL_WIDEN_PAIRS 1
#endif

template <typename T, int R, int P>
void tile_simd(const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
#if defined(__AVX512BF16__)
    if constexpr (kPairs<T>)
        tile_pairs<R, P>(x, K, panels, panel_stride, acc);
    else
        tile_flat<T, R, P>(x, K, panels, panel_stride, acc);
#else
    static_assert(!kPairs<T>, "paired bf16 without AVX512-BF16 runs tile_pairs_widen on float32 rows");
    tile_flat<T, R, P>(x, K, panels, panel_stride, acc);
#endif
}

// Runtime (rows, panels) -> the matching instantiation.
template <typename T, int R = 1>
void tile_dispatch(int rows, int npanels, const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
    if constexpr (R <= kMaxRows) {
        if (rows == R) {
            if (npanels == 2) return tile_simd<T, R, 2>(x, K, panels, panel_stride, acc);
            return tile_simd<T, R, 1>(x, K, panels, panel_stride, acc);
        }
        return tile_dispatch<T, R + 1>(rows, npanels, x, K, panels, panel_stride, acc);
    }
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define TOKENMILL_AVX2_PANELS 1
// AVX2: a 16-lane panel is two 8-lane halves, so a tile covers one panel at a time
// (R rows x 2 halves: at most 12 accumulators of the 16 registers). Each lane is the
// same sequence as above: k ascending, one FMA per k.

using tokenmill::load8;

// R rows x one panel [K][16]; row r's 16 sums go to acc + r * acc_stride.
template <typename T, int R>
void panel_avx2(const T* x, int64_t K, const T* panel, float* acc, int64_t acc_stride) {
    __m256 lo[R], hi[R];
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
        const __m256 wl = load8(panel + k * kLanes), wh = load8(panel + k * kLanes + 8);
        for (int r = 0; r < R; ++r) {
            const __m256 xv = _mm256_set1_ps(static_cast<float>(x[r * K + k]));
            lo[r] = _mm256_fmadd_ps(xv, wl, lo[r]);
            hi[r] = _mm256_fmadd_ps(xv, wh, hi[r]);
        }
    }
    for (int r = 0; r < R; ++r) {
        _mm256_storeu_ps(acc + r * acc_stride, lo[r]);
        _mm256_storeu_ps(acc + r * acc_stride + 8, hi[r]);
    }
}

template <typename T, int R = 1>
void tile_dispatch_avx2(int rows, int npanels, const T* x, int64_t K, const T* panels, int64_t panel_stride,
                        float* acc) {
    if constexpr (R <= kMaxRows) {
        if (rows == R) {
            for (int p = 0; p < npanels; ++p)
                panel_avx2<T, R>(x, K, panels + p * panel_stride, acc + p * kLanes, npanels * kLanes);
            return;
        }
        return tile_dispatch_avx2<T, R + 1>(rows, npanels, x, K, panels, panel_stride, acc);
    }
}
#endif

template <typename T>
void tile(int rows, int npanels, const T* x, int64_t K, const T* panels, int64_t panel_stride, float* acc) {
#if defined(__AVX512F__)
    if constexpr (tokenmill::has_vec16<T>) {
        tile_dispatch<T>(rows, npanels, x, K, panels, panel_stride, acc);
        return;
    }
#elif TOKENMILL_AVX2_PANELS
    if constexpr (tokenmill::has_vec16<T>) {
        tile_dispatch_avx2<T>(rows, npanels, x, K, panels, panel_stride, acc);
        return;
    }
#endif
    tile_portable<T>(x, K, panels, panel_stride, rows, npanels, acc);
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

template <typename T>
int64_t panel_elems(int64_t K) {  // elements of one packed panel
    return kPairs<T> ? round_up(K, kKBlock) * kLanes : K * kLanes;
}

template <typename T>
int64_t packed_panels(int64_t N) {  // panels in the packed tensor (the paired layout pads to even)
    const int64_t P = (N + kLanes - 1) / kLanes;
    return kPairs<T> ? round_up(P, 2) : P;
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
#define TOKENMILL_AMX 1

// Linux hands AMX tile state to a process only on request (kernel >= 5.16).
bool request_amx() {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool amx_usable() {
    static const bool ok = request_amx();  // decided once: a process never mixes AMX and vectors
    return ok;
}

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Tiles: 0-3 C (2 row blocks x 2 panels, 16 x 16 float32), 4-5 A (16 rows x 32 k bf16),
// 6-7 B (16 k-pairs x 16 columns x 2 bf16). Every tile is 16 rows of 64 bytes.
void load_tile_config() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

// x [M, K] bf16 -> out [M, N] bf16 over the paired layout (K padded to 32, panels to even).
void amx_linear(const c10::BFloat16* x, int64_t K, int64_t M, const c10::BFloat16* packed, int64_t N,
                const float* bias, c10::BFloat16* out) {
    const int64_t Kp = round_up(K, kKBlock), Mp = round_up(M, 32);
    const int64_t panel_stride = Kp * kLanes, groups = packed_panels<c10::BFloat16>(N) / 2;
    // A rows padded with zeros to a multiple of 32, k to a multiple of 32: zero rows and zero
    // k add exact zeros, and each C element depends only on its own A row.
    std::vector<c10::BFloat16> xpad(static_cast<size_t>(Mp * Kp), c10::BFloat16(0.f));
    for (int64_t m = 0; m < M; ++m) std::memcpy(&xpad[m * Kp], x + m * K, K * sizeof(c10::BFloat16));
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
        load_tile_config();
        alignas(64) float c[16 * 16];
        for (int64_t g = begin; g < end; ++g) {
            const c10::BFloat16* b0 = packed + 2 * g * panel_stride;
            const c10::BFloat16* b1 = b0 + panel_stride;
            for (int64_t m0 = 0; m0 < M; m0 += 32) {
                const bool two = M - m0 > 16;  // rows m0 + 16.. exist: second row block
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t k0 = 0; k0 < Kp; k0 += kKBlock) {
                    _tile_loadd(4, &xpad[m0 * Kp + k0], Kp * 2);
                    _tile_loadd(6, b0 + k0 * kLanes, 64);
                    _tile_loadd(7, b1 + k0 * kLanes, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    if (two) {
                        _tile_loadd(5, &xpad[(m0 + 16) * Kp + k0], Kp * 2);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
                for (int t = 0; t < (two ? 4 : 2); ++t) {
                    switch (t) {  // tile numbers must be compile-time constants
                        case 0: _tile_stored(0, c, 64); break;
                        case 1: _tile_stored(1, c, 64); break;
                        case 2: _tile_stored(2, c, 64); break;
                        default: _tile_stored(3, c, 64); break;
                    }
                    const int64_t r0 = m0 + (t / 2) * 16, n0 = (2 * g + t % 2) * kLanes;
                    const int64_t r_end = std::min<int64_t>(r0 + 16, M), n_end = std::min<int64_t>(n0 + kLanes, N);
                    for (int64_t r = r0; r < r_end; ++r)
                        for (int64_t n = n0; n < n_end; ++n) {
                            const float v = c[(r - r0) * 16 + (n - n0)];
                            out[r * N + n] = c10::BFloat16(bias ? v + bias[n] : v);
                        }
                }
            }
        }
        _tile_release();
    });
}
#else
#define TOKENMILL_AMX 0
#endif

// out [M, N] = rows x [M, K] times the packed weight w (N columns), bias added in float32.
// Threads split the panel groups; each output element is computed by one tile call, start
// to end, so the split never changes a value. tile(rows, panels, x, K, w, stride, acc)
// fills acc [rows][panels][16].
template <int Rows, typename TX, typename TW, typename Tile>
void run_tiles(const TX* x, int64_t M, int64_t K, const TW* w, int64_t N, const float* b, TW* o, Tile tile) {
    const int64_t P = (N + kLanes - 1) / kLanes, stride = panel_elems<TW>(K);
    const int64_t groups = (P + kMaxPanels - 1) / kMaxPanels;
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
        alignas(64) float acc[Rows * kMaxPanels * kLanes];
        for (int64_t g = begin; g < end; ++g) {
            const int64_t p0 = g * kMaxPanels;
            const int np = static_cast<int>(std::min<int64_t>(kMaxPanels, P - p0));
            for (int64_t m0 = 0; m0 < M; m0 += Rows) {
                const int rows = static_cast<int>(std::min<int64_t>(Rows, M - m0));
                tile(rows, np, x + m0 * K, K, w + p0 * stride, stride, acc);
                for (int r = 0; r < rows; ++r)
                    for (int p = 0; p < np; ++p) {
                        const int64_t n0 = (p0 + p) * kLanes;
                        const int64_t n_end = std::min<int64_t>(n0 + kLanes, N);
                        const float* a = acc + (r * np + p) * kLanes;
                        TW* dst = o + (m0 + r) * N;
                        for (int64_t n = n0; n < n_end; ++n)
                            dst[n] = static_cast<TW>(b ? a[n - n0] + b[n] : a[n - n0]);
                    }
            }
        }
    });
}

// The vector (or portable) path for x [M, K] in T.
template <typename T>
void vector_linear(const torch::Tensor& x, int64_t M, int64_t K, const T* w, int64_t N, const float* b, T* o) {
#if TOKENMILL_WIDEN_PAIRS
    if constexpr (kPairs<T>) {
        const auto xf = x.to(torch::kFloat);  // [M, K]: widened once, not once per tile
        run_tiles<kWidenRows>(xf.data_ptr<float>(), M, K, w, N, b, o, tile_dispatch_widen<>);
        return;
    } else
#endif
    run_tiles<kMaxRows>(x.data_ptr<T>(), M, K, w, N, b, o, tile<T>);
}

void check_cpu(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
}

}  // namespace

torch::Tensor tokenmill::pack_invariant_weight(torch::Tensor weight) {
    check_cpu(weight, "weight");
    TORCH_CHECK(weight.dim() == 2, "weight must be [N, K]");
    TORCH_CHECK(weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16,
                "weight must be float32 or bfloat16");
    const int64_t N = weight.size(0), K = weight.size(1);
    const bool pairs = weight.scalar_type() == torch::kBFloat16 && kPairs<c10::BFloat16>;
    const int64_t P = pairs ? packed_panels<c10::BFloat16>(N) : packed_panels<float>(N);
    const int64_t Kp = pairs ? round_up(K, kKBlock) : K;
    auto w = torch::zeros({P * kLanes, Kp}, weight.options());
    w.narrow(0, 0, N).narrow(1, 0, K).copy_(weight);
    if (!pairs) return w.view({P, kLanes, K}).permute({0, 2, 1}).contiguous();  // [P, K, 16]
    return w.view({P, kLanes, Kp / 2, 2}).permute({0, 2, 1, 3}).contiguous();  // [P2, K2, 16, 2]
}

torch::Tensor tokenmill::invariant_linear(torch::Tensor x, torch::Tensor packed, int64_t N,
                                          std::optional<torch::Tensor> bias) {
    check_cpu(x, "x");
    check_cpu(packed, "packed");
    TORCH_CHECK(x.dim() == 2, "x must be [M, K]");
    TORCH_CHECK(x.scalar_type() == packed.scalar_type(), "x and the packed weight must share a dtype");
    x = x.contiguous();
    const int64_t M = x.size(0), K = x.size(1);
    TORCH_CHECK(packed.is_contiguous(), "packed weight must be contiguous");
    if (bias) {
        check_cpu(*bias, "bias");
        TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, "bias must be [N]");
        bias = bias->to(torch::kFloat).contiguous();
    }
    auto out = torch::empty({M, N}, x.options());
    if (M == 0 || N == 0) return out;
    const float* b = bias ? bias->data_ptr<float>() : nullptr;
    AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::BFloat16, x.scalar_type(), "invariant_linear", [&] {
        TORCH_CHECK(packed.size(0) == packed_panels<scalar_t>(N) &&
                    packed.numel() == packed.size(0) * panel_elems<scalar_t>(K),
                    "packed weight does not match N = ", N, ", K = ", K);
#if TOKENMILL_AMX
        if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
            if (amx_usable()) {
                amx_linear(x.data_ptr<c10::BFloat16>(), K, M, packed.data_ptr<c10::BFloat16>(), N, b, out.data_ptr<c10::BFloat16>());
                return;
            }
        }
#endif
        const scalar_t* wp = packed.data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        vector_linear<scalar_t>(x, M, K, wp, N, b, o);
    });
    return out;
}
