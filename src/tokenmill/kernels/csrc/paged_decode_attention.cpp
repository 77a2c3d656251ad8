// Paged attention for CPU: each query row (one token) attends over the first
// context_lens[b] slots of its sequence, read in place through its block table
// (no gather copy). A decode is one row; a prefill chunk of n tokens is n rows
// sharing one block table, row i's context ending at its own position, which
// makes the attention causal once the chunk's K/V are in the cache.
//
// Shapes:
//   q            [B, Hq, D]                         float32 or bfloat16 (same dtype as the caches)
//   k_cache      [num_blocks, Hkv, block_size, D]   one part (K) of a layer's cache
//   v_cache      [num_blocks, Hkv, block_size, D]   one part (V), or the same tensor as k_cache
//   block_tables [B, max_blocks]                    int64
//   context_lens [B]                                int64, 1 <= len <= max_blocks * block_size
//   returns      [B, Hq, D]                         dtype of q
// The caches are views into a layer's [num_blocks, parts, Hkv, block_size, D]
// tensor (model/kv_cache_spec.py), so strided across blocks: any block and head
// stride (equal for K and V), each (block, head) a contiguous [block_size, D] run.
// Slot = block * block_size + offset: row `offset` of that block's run.
// Query head h*G + g (G = Hq / Hkv) reads KV head h, as in grouped-query attention.
// Work item = (run, KV head). A run is up to kRunRows consecutive rows of one
// sequence (the same block table, context lengths L0, L0 + 1, ...: a prefill
// chunk's or a draft verification's rows), else one row; its R x G query rows
// share every K/V row read (the AVX-512 path reads and widens each row once for
// all of them). Row r attends over its own L0 + r tokens only: each query row's
// scores, softmax and output are computed as if it were alone (the same
// operations in the same order), so results do not depend on the grouping.
// Scores, softmax and the output accumulate in float32.
#include "attention_work.h"
#include "ops.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

// ---- portable path: any head_dim, any x86/ARM compiler ---------------------

template <typename T>
inline void to_float(const T* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// One (sequence, KV head): G query rows qf [G, D] (already scaled) over L tokens.
// kh, vh: this head's rows in block 0; block b's run starts block_stride elements
// further per block. Writes the normalised output rows to of [G, D].
// scores: scratch of G * L floats.
template <typename T>
void attend_portable(const float* qf, const T* kh, const T* vh, const int64_t* table, int64_t L,
                     int64_t G, int64_t D, int64_t block_size, int64_t block_stride, float* scores, float* row,
                     float* of) {
    for (int64_t t = 0; t < L; ++t) {
        to_float(kh + table[t / block_size] * block_stride + t % block_size * D, row, D);
        for (int64_t g = 0; g < G; ++g) {
            float s = 0.f;
            for (int64_t d = 0; d < D; ++d) s += qf[g * D + d] * row[d];
            scores[g * L + t] = s;
        }
    }
    std::fill(of, of + G * D, 0.f);
    for (int64_t g = 0; g < G; ++g) {
        float* sg = scores + g * L;
        const float m = *std::max_element(sg, sg + L);
        float sum = 0.f;
        for (int64_t t = 0; t < L; ++t) sum += (sg[t] = std::exp(sg[t] - m));
        for (int64_t t = 0; t < L; ++t) sg[t] /= sum;
    }
    for (int64_t t = 0; t < L; ++t) {
        to_float(vh + table[t / block_size] * block_stride + t % block_size * D, row, D);
        for (int64_t g = 0; g < G; ++g)
            for (int64_t d = 0; d < D; ++d) of[g * D + d] += scores[g * L + t] * row[d];
    }
}

#if defined(__AVX2__)  // every AVX-512 CPU has AVX2 too: shared by both paths below
#include <immintrin.h>

// Prefetch one row (D values) into L1.
template <typename T>
inline void prefetch_row(const T* row, int64_t D) {
    const char* p = reinterpret_cast<const char*>(row);
    for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}
#endif

#if defined(__AVX512F__)
// ---- AVX-512 path: head_dim = 16 * NC, NC in {4, 8} ------------------------

using tokenmill::exp_shifted_sum16;
using tokenmill::load16;
using tokenmill::max16;
using tokenmill::tail_mask;

// Lane i of the result = the sum of v[i]'s 16 lanes: a transposing reduction (15
// steps of two permutes and an add for 16 rows, where one horizontal sum per row
// costs about eight shuffles and adds).
inline __m512 sum_lanes16(__m512 v[16]) {
    // Each level halves the vectors and the lanes per row: [a(8), b(8)], then
    // [a(4), b(4), c(4), d(4)], then 2 lanes per row, then one.
    const __m512i lo8 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i hi8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const __m512i lo4 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i hi4 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    const __m512i lo2 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const __m512i hi2 = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    const __m512i lo1 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i hi1 = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i lo[4] = {lo8, lo4, lo2, lo1}, hi[4] = {hi8, hi4, hi2, hi1};
    for (int level = 0, n = 16; level < 4; ++level, n /= 2)
        for (int i = 0; i < n / 2; ++i)
            v[i] = _mm512_add_ps(_mm512_permutex2var_ps(v[2 * i], lo[level], v[2 * i + 1]),
                                 _mm512_permutex2var_ps(v[2 * i], hi[level], v[2 * i + 1]));
    return v[0];
}

// Walks a sequence's rows t = 0, 1, ... through its block table without a division
// per row (a 64-bit divide costs tens of cycles, more than a row's dot product).
template <typename T>
struct RowCursor {
    const T* head;  // this head's run in block 0
    const int64_t* table;
    int64_t block_size, block_stride, block = 0, offset = 0;
    const T* row(int64_t D) const { return head + table[block] * block_stride + offset * D; }
    void next() {
        if (++offset == block_size) offset = 0, ++block;
    }
};

// Scores s[g, t] = q_g . k_t (q already scaled) for the G query rows over L K rows,
// 16 rows at a time: each K row is read (and widened, for bf16) once for all G rows,
// and each row's dot product stays a 16-lane vector until one transposing
// reduction gives the 16 scores. The K pass also prefetches the next 16 K rows and
// this group's V rows: a block's run sits a block stride (all parts and heads of a
// block) from the next, so the hardware prefetcher, which follows addresses, stops
// at every run (the earlier kernel's prefetch of the next block, measured inside
// SmolLM2 decode steps: attention 18-30% faster with it than without in bf16, 4-7%
// in float32). Against one horizontal sum per K row
// and a K/V pass per query row, this measured 1.3-1.5x faster in bf16 and 1.15-1.2x
// in float32 at batch 32-256 (docs/PERFORMANCE.md, "Decode attention on AVX-512").
template <int NC, typename T>
void scores_avx512(const float* qf, const T* kh, const T* vh, const int64_t* table, int64_t L, int64_t G,
                   int64_t block_size, int64_t block_stride, float* scores) {
    constexpr int64_t D = 16 * NC;
    alignas(64) float widened[std::is_same_v<T, float> ? 1 : 16 * D];  // 16 K rows in float32 (bf16 caches)
    RowCursor<T> k_row{kh, table, block_size, block_stride}, v_row{vh, table, block_size, block_stride};
    RowCursor<T> k_ahead = k_row;  // 16 rows ahead of k_row: the rows to prefetch
    for (int j = 0; j < 16 && j < L; ++j) k_ahead.next();
    for (int64_t t0 = 0; t0 < L; t0 += 16) {
        const int n = static_cast<int>(std::min<int64_t>(16, L - t0));
        const float* k[16];
        for (int j = 0; j < n; ++j, k_row.next(), v_row.next()) {
            const T* row = k_row.row(D);
            if (t0 + 16 + j < L) {
                prefetch_row(k_ahead.row(D), D);
                k_ahead.next();
            }
            prefetch_row(v_row.row(D), D);
            if constexpr (std::is_same_v<T, float>) {
                k[j] = row;
            } else {
                for (int c = 0; c < NC; ++c) _mm512_store_ps(widened + j * D + 16 * c, load16(row + 16 * c));
                k[j] = widened + j * D;
            }
        }
        for (int64_t g = 0; g < G; ++g) {
            __m512 q[NC];
            for (int c = 0; c < NC; ++c) q[c] = _mm512_loadu_ps(qf + g * D + 16 * c);
            __m512 dot[16];
            for (int j = 0; j < 16; ++j) {
                if (j >= n) {
                    dot[j] = _mm512_setzero_ps();
                    continue;
                }
                __m512 acc = _mm512_mul_ps(q[0], _mm512_loadu_ps(k[j]));
                for (int c = 1; c < NC; ++c) acc = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(k[j] + 16 * c), acc);
                dot[j] = acc;
            }
            _mm512_mask_storeu_ps(scores + g * L + t0, tail_mask(n), sum_lanes16(dot));
        }
    }
}

// s[t] <- softmax(s)[t] over L scores, in place.
inline void softmax_avx512(float* sg, int64_t L) {
    const __m512 inv = _mm512_set1_ps(1.f / exp_shifted_sum16(sg, L, max16(sg, L)));
    for (int64_t t = 0; t < L; t += 16)
        _mm512_mask_storeu_ps(sg + t, tail_mask(L - t), _mm512_mul_ps(_mm512_maskz_loadu_ps(tail_mask(L - t), sg + t), inv));
}

// Output rows of[g] = sum_{t < len[g]} p[g, t] v_t for GN query rows at once (GN x NC
// accumulators in registers): each V row is read and widened once for all of them.
// p rows are `stride` floats apart; the rows' lengths differ by at most a run's
// rows, so the shared loop runs to the shortest and a short tail adds each row's
// own last values (a row never reads past its own context).
template <int NC, int GN, typename T>
void weigh_values(const float* p, int64_t stride, const int64_t* len, const T* vh, const int64_t* table,
                  int64_t block_size, int64_t block_stride, float* of) {
    constexpr int64_t D = 16 * NC;
    __m512 acc[GN][NC];
    int64_t shortest = len[0], longest = len[0];
    for (int g = 0; g < GN; ++g) {
        shortest = std::min(shortest, len[g]), longest = std::max(longest, len[g]);
        for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_setzero_ps();
    }
    for (int64_t t0 = 0; t0 < shortest; t0 += block_size) {
        const T* vb = vh + table[t0 / block_size] * block_stride;
        const int64_t n = std::min(block_size, shortest - t0);
        for (int64_t j = 0; j < n; ++j) {
            __m512 v[NC];
            for (int c = 0; c < NC; ++c) v[c] = load16(vb + j * D + 16 * c);
            for (int g = 0; g < GN; ++g) {
                const __m512 w = _mm512_set1_ps(p[g * stride + t0 + j]);
                for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(w, v[c], acc[g][c]);
            }
        }
    }
    for (int64_t t = shortest; t < longest; ++t) {
        const T* vt = vh + table[t / block_size] * block_stride + t % block_size * D;
        for (int g = 0; g < GN; ++g) {
            if (t >= len[g]) continue;
            const __m512 w = _mm512_set1_ps(p[g * stride + t]);
            for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(w, load16(vt + 16 * c), acc[g][c]);
        }
    }
    for (int g = 0; g < GN; ++g)
        for (int c = 0; c < NC; ++c) _mm512_storeu_ps(of + g * D + 16 * c, acc[g][c]);
}

// Query rows per V pass: at most 16 accumulators (4 rows of head_dim 64, 2 of 128).
template <int NC>
constexpr int kValueRows = 16 / NC;

template <int NC, typename T, int GN = 1>
void weigh_values_dispatch(int gn, const float* p, int64_t stride, const int64_t* len, const T* vh,
                           const int64_t* table, int64_t block_size, int64_t block_stride, float* of) {
    if constexpr (GN <= kValueRows<NC>) {
        if (gn == GN) return weigh_values<NC, GN>(p, stride, len, vh, table, block_size, block_stride, of);
        return weigh_values_dispatch<NC, T, GN + 1>(gn, p, stride, len, vh, table, block_size, block_stride, of);
    }
}

// Q = R x G query rows qf [Q, D], row q over len[q] tokens (len[q] <= L): scores over
// all L for every row (a K row is read once for all), then each row's softmax and
// values over its own len[q] only. scores: Q x L floats.
template <int NC, typename T>
void attend_avx512(const float* qf, const T* kh, const T* vh, const int64_t* table, int64_t L, const int64_t* len,
                   int64_t Q, int64_t block_size, int64_t block_stride, float* scores, float* of) {
    constexpr int64_t D = 16 * NC;
    scores_avx512<NC>(qf, kh, vh, table, L, Q, block_size, block_stride, scores);
    for (int64_t q = 0; q < Q; ++q) softmax_avx512(scores + q * L, len[q]);
    for (int64_t q0 = 0; q0 < Q; q0 += kValueRows<NC>) {
        const int qn = static_cast<int>(std::min<int64_t>(kValueRows<NC>, Q - q0));
        weigh_values_dispatch<NC, T>(qn, scores + q0 * L, L, len + q0, vh, table, block_size, block_stride,
                                     of + q0 * D);
    }
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// ---- AVX2 path: head_dim = 8 * NC, NC in {8, 16} ----------------------------
// The AVX-512 path's order of work with 8 lanes; the softmax's last L % 8 scores
// take a scalar loop.

using tokenmill::exp8;
using tokenmill::hmax8;
using tokenmill::hsum8;
using tokenmill::load8;


// Scores s[t] = q . k_t (q already scaled) over L rows, block by block; the first
// pass (prefetch) also fetches the next K block and this V block, as above.
template <int NC, typename T>
void scores_avx2(const float* qf, const T* kh, const T* vh, const int64_t* table, int64_t L, int64_t block_size,
                 int64_t block_stride, bool prefetch, float* sg) {
    constexpr int64_t D = 8 * NC;
    for (int64_t t0 = 0; t0 < L; t0 += block_size) {
        const T* kb = kh + table[t0 / block_size] * block_stride;
        const int64_t n = std::min(block_size, L - t0);
        const T* k_next = prefetch && t0 + block_size < L ? kh + table[t0 / block_size + 1] * block_stride : nullptr;
        const T* v_this = prefetch ? vh + table[t0 / block_size] * block_stride : nullptr;
        for (int64_t j = 0; j < n; ++j) {
            if (k_next != nullptr) prefetch_row(k_next + j * D, D);
            if (v_this != nullptr) prefetch_row(v_this + j * D, D);
            const T* k = kb + j * D;
            // Two accumulators: half the FMA chain's latency per row.
            __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(qf), load8(k));
            __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(qf + 8), load8(k + 8));
            for (int c = 2; c < NC; c += 2) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qf + 8 * c), load8(k + 8 * c), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qf + 8 * c + 8), load8(k + 8 * c + 8), a1);
            }
            sg[t0 + j] = hsum8(_mm256_add_ps(a0, a1));
        }
    }
}

// s[t] <- e^(s[t] - max s) over L scores; returns their sum.
inline float exp_shifted_avx2(float* sg, int64_t L) {
    const int64_t L8 = L - L % 8;
    float m = -std::numeric_limits<float>::infinity();
    if (L8 > 0) {
        __m256 mx = _mm256_loadu_ps(sg);
        for (int64_t t = 8; t < L8; t += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sg + t));
        m = hmax8(mx);
    }
    for (int64_t t = L8; t < L; ++t) m = std::max(m, sg[t]);
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t t = 0; t < L8; t += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + t), mv));
        _mm256_storeu_ps(sg + t, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum8(sum);
    for (int64_t t = L8; t < L; ++t) total += (sg[t] = std::exp(sg[t] - m));
    return total;
}

template <int NC, typename T>
void attend_avx2(const float* qf, const T* kh, const T* vh, const int64_t* table, int64_t L, int64_t G,
                 int64_t block_size, int64_t block_stride, float* scores, float* of) {
    constexpr int64_t D = 8 * NC;
    for (int64_t g = 0; g < G; ++g) {
        float* sg = scores + g * L;
        scores_avx2<NC>(qf + g * D, kh, vh, table, L, block_size, block_stride, g == 0, sg);
        const __m256 inv = _mm256_set1_ps(1.f / exp_shifted_avx2(sg, L));
        __m256 acc[NC];
        for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t t0 = 0; t0 < L; t0 += block_size) {  // V rows, in place
            const T* vb = vh + table[t0 / block_size] * block_stride;
            const int64_t n = std::min(block_size, L - t0);
            for (int64_t j = 0; j < n; ++j) {
                const __m256 p = _mm256_set1_ps(sg[t0 + j]);
                for (int c = 0; c < NC; ++c) acc[c] = _mm256_fmadd_ps(p, load8(vb + j * D + 8 * c), acc[c]);
            }
        }
        for (int c = 0; c < NC; ++c) _mm256_storeu_ps(of + g * D + 8 * c, _mm256_mul_ps(acc[c], inv));
    }
}
#endif

// The SIMD path where it applies (float32/bfloat16, head_dim 64 or 128; AVX-512, else
// AVX2 + FMA); false otherwise. R rows of G query rows each, qf [R * G, D]; len: each
// query row's context (the G rows of one row share it), L: the longest.
template <typename T>
bool attend_fast(const float* qf, const T* kh, const T* vh, const int64_t* table, int64_t L, const int64_t* len,
                 int64_t R, int64_t G, int64_t D, int64_t block_size, int64_t block_stride, float* scores,
                 float* of) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, c10::BFloat16>) {
        if (D == 64)
            return attend_avx512<4>(qf, kh, vh, table, L, len, R * G, block_size, block_stride, scores, of), true;
        if (D == 128)
            return attend_avx512<8>(qf, kh, vh, table, L, len, R * G, block_size, block_stride, scores, of), true;
    }
#elif defined(__AVX2__) && defined(__FMA__)
    if constexpr (tokenmill::has_vec8<T>) {
        if (D != 64 && D != 128) return false;
        for (int64_t r = 0; r < R; ++r) {  // one row at a time: this path reads K/V per query row anyway
            const int64_t o = r * G * D;
            if (D == 64) attend_avx2<8>(qf + o, kh, vh, table, len[r * G], G, block_size, block_stride, scores, of + o);
            else attend_avx2<16>(qf + o, kh, vh, table, len[r * G], G, block_size, block_stride, scores, of + o);
        }
        return true;
    }
#endif
    return false;
}

// Cache strides, in elements, shared by K and V.
struct CacheStrides {
    int64_t block;
    int64_t head;
};

using tokenmill::attention_work::kRunRows;
using tokenmill::attention_work::shares;
using tokenmill::attention_work::split_runs;
using tokenmill::attention_work::work_items;
using tokenmill::attention_work::WorkItem;

// Per-thread scratch for the largest run: its query rows in float32 (scaled), their
// outputs, each query row's context length, and the scores.
struct Scratch {
    std::vector<float> qf, of, row, scores;
    std::vector<int64_t> len;
    Scratch(int64_t Q, int64_t D, int64_t longest) : qf(Q * D), of(Q * D), row(D), scores(Q * longest), len(Q) {}
};

// One work item: its R rows' G query rows of KV head h, read and written in place.
template <typename T>
void attend_item(const WorkItem& item, const T* q, const T* k_cache, const T* v_cache, const int64_t* tables,
                 const int64_t* lens, T* out, int64_t Hq, int64_t G, int64_t D, CacheStrides stride,
                 int64_t max_blocks, int64_t block_size, float scale, Scratch& s) {
    const auto [first, last, h] = item;
    const int64_t R = last - first;
    for (int64_t r = 0; r < R; ++r) {
        const T* qb = q + ((first + r) * Hq + h * G) * D;
        for (int64_t i = 0; i < G * D; ++i) s.qf[r * G * D + i] = static_cast<float>(qb[i]) * scale;
        std::fill(s.len.begin() + r * G, s.len.begin() + (r + 1) * G, lens[first + r]);
    }
    const T* kh = k_cache + h * stride.head;
    const T* vh = v_cache + h * stride.head;
    const int64_t* table = tables + first * max_blocks;  // every row of a run reads the same table
    if (!attend_fast(s.qf.data(), kh, vh, table, lens[last - 1], s.len.data(), R, G, D, block_size, stride.block,
                     s.scores.data(), s.of.data()))
        for (int64_t r = 0; r < R; ++r)
            attend_portable(s.qf.data() + r * G * D, kh, vh, table, lens[first + r], G, D, block_size,
                            stride.block, s.scores.data(), s.row.data(), s.of.data() + r * G * D);
    for (int64_t r = 0; r < R; ++r) {
        T* o = out + ((first + r) * Hq + h * G) * D;
        for (int64_t i = 0; i < G * D; ++i) o[i] = static_cast<T>(s.of[r * G * D + i]);
    }
}

template <typename T>
void decode_attention(const T* q, const T* k_cache, const T* v_cache, const int64_t* tables,
                      const int64_t* lens, T* out, int64_t B, int64_t Hq, int64_t Hkv, int64_t D,
                      CacheStrides stride, int64_t max_blocks, int64_t block_size, float scale) {
    const int64_t G = Hq / Hkv;
    const int64_t longest = *std::max_element(lens, lens + B);
    const int64_t threads = at::get_num_threads();
    // At least two items per thread from a lone stretch (a 2-row verification: two 1-row runs).
    const auto runs = split_runs(tables, lens, B, max_blocks, block_size, (2 * threads + Hkv - 1) / Hkv);
    const int64_t parts = std::min<int64_t>(static_cast<int64_t>(runs.size()) * Hkv, threads);
    const std::vector<WorkItem> items = work_items(runs, Hkv);
    const auto share = shares(items, lens, parts);
    at::parallel_for(0, parts, 1, [&](int64_t part_begin, int64_t part_end) {
        Scratch scratch(kRunRows * G, D, longest);
        for (int64_t part = part_begin; part < part_end; ++part)
            for (int64_t w : share[part])
                attend_item(items[w], q, k_cache, v_cache, tables, lens, out, Hq, G, D, stride, max_blocks,
                            block_size, scale, scratch);
    });
}

}  // namespace

torch::Tensor tokenmill::paged_decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                     torch::Tensor block_tables, torch::Tensor context_lens,
                                     int64_t block_size, double scale) {
    TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.dim() == 4,
                "q [B,Hq,D], caches [num_blocks,Hkv,block_size,D]");
    TORCH_CHECK(q.scalar_type() == k_cache.scalar_type() && q.scalar_type() == v_cache.scalar_type(),
                "q and the caches must share a dtype");
    TORCH_CHECK(block_tables.scalar_type() == torch::kLong && context_lens.scalar_type() == torch::kLong,
                "block_tables and context_lens must be int64");
    TORCH_CHECK(q.device().is_cpu() && k_cache.device().is_cpu() && v_cache.device().is_cpu(), "CPU tensors only");
    q = q.contiguous();
    block_tables = block_tables.contiguous();
    context_lens = context_lens.contiguous();
    const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), Hkv = k_cache.size(1);
    TORCH_CHECK(Hq % Hkv == 0 && k_cache.size(3) == D, "head counts or head_dim disagree");
    TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == B && context_lens.size(0) == B,
                "one block table and length per sequence");
    TORCH_CHECK(block_size >= 1 && k_cache.size(2) == block_size, "caches must hold blocks of block_size slots");
    TORCH_CHECK(v_cache.sizes() == k_cache.sizes() && v_cache.strides() == k_cache.strides(),
                "k and v caches must match in shape and strides");
    // The kernel reads each (block, head) as one run of block_size contiguous rows.
    TORCH_CHECK(k_cache.stride(3) == 1 && k_cache.stride(2) == D, "each cache [block_size, D] run must be contiguous");
    // Every block a sequence reads must lie inside the cache: a bad table would read out of bounds.
    const int64_t max_blocks = block_tables.size(1), num_blocks = k_cache.size(0);
    const int64_t* lens = context_lens.data_ptr<int64_t>();
    const int64_t* tables = block_tables.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
        TORCH_CHECK(lens[b] >= 1 && lens[b] <= max_blocks * block_size, "context length out of range");
        for (int64_t i = 0; i < (lens[b] + block_size - 1) / block_size; ++i)
            TORCH_CHECK(tables[b * max_blocks + i] >= 0 && tables[b * max_blocks + i] < num_blocks,
                        "block id out of range");
    }
    const CacheStrides stride{k_cache.stride(0), k_cache.stride(1)};
    auto out = torch::empty_like(q);
    if (B == 0) return out;  // decode_attention takes the longest context: none to take
    AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::BFloat16, q.scalar_type(), "paged_decode_attention", [&] {
        decode_attention<scalar_t>(q.data_ptr<scalar_t>(), k_cache.data_ptr<scalar_t>(),
                                   v_cache.data_ptr<scalar_t>(), tables, lens, out.data_ptr<scalar_t>(), B, Hq, Hkv,
                                   D, stride, max_blocks, block_size, static_cast<float>(scale));
    });
    return out;
}
