// Multi-head latent attention (DeepSeek MLA) over the paged latent cache, on CPU,
// in the weight-absorbed form: every query head attends over one shared latent row
// per token (multi-query, one KV head), the whole row as its key and the row's first
// Dv values as its value:
//   scores[t, h, j] = scale * dot(q[t, h, :D], row_j[:D])     for j < context_lens[t]
//   out[t, h, :Dv]  = sum_j softmax_j(scores[t, h])[j] * row_j[:Dv]
//
// Shapes:
//   q            [T, H, D]                        float32 or bfloat16 (same dtype as the cache)
//   cache        [num_blocks, 1, block_size, D]   `layer[:, 0]` of a one-part layer
//                                                 [num_blocks, 1, 1, block_size, D] (model/kv_cache_spec.py)
//   block_tables [T, max_blocks]                  int64: row t's sequence's block table
//   context_lens [T]                              int64, 1 <= len <= max_blocks * block_size
//   returns      [T, H, Dv]                       dtype of q (Dv = v_dim <= D)
// D = kv_lora_rank + qk_rope_head_dim (DeepSeek-V3: 512 + 64), Dv = kv_lora_rank.
// As in paged_decode_attention.cpp a decode is one row and a prefill chunk of n tokens
// is n rows sharing a block table, each row's context ending at its own position.
// The cache may be strided across blocks (any block stride); each block's
// [block_size, D] run is contiguous. Slot = block * block_size + offset.
//
// Work item = (row t, tile of heads). All heads of a row read the same cache rows,
// so an item reads each row once and uses it for every head of its tile; tiles are
// as large as possible while every thread still gets items (T = 1 splits the heads).
// Scores, softmax and the output accumulate in float32.
#include "ops.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

// Where the rows of one sequence live: slot j is row j % block_size of block
// table[j / block_size], whose run starts block_stride elements per block id in.
template <typename T>
struct SeqRows {
    const T* cache;
    const int64_t* table;
    int64_t block_size, block_stride, D;

    const T* row(int64_t slot) const {
        return cache + table[slot / block_size] * block_stride + slot % block_size * D;
    }
};

// ---- portable path: any D and Dv, any compiler -------------------------------

// One item, nh heads (qf [nh, D], already scaled) over L rows, in two passes like
// paged_decode_attention.cpp: all scores, softmax (minus the max), then the values.
// Writes o [nh, Dv] (unnormalised) and l [nh] (softmax denominators).
// scores: scratch of nh * L floats; row: scratch of D floats.
template <typename T>
void attend_item_portable(const float* qf, int64_t nh, const SeqRows<T>& seq, int64_t L, int64_t Dv,
                          float* scores, float* row, float* o, float* l) {
    const int64_t D = seq.D;
    for (int64_t j = 0; j < L; ++j) {
        const T* r = seq.row(j);
        for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(r[d]);
        for (int64_t h = 0; h < nh; ++h) {
            float s = 0.f;
            for (int64_t d = 0; d < D; ++d) s += qf[h * D + d] * row[d];
            scores[h * L + j] = s;
        }
    }
    for (int64_t h = 0; h < nh; ++h) {
        float* sh = scores + h * L;
        const float m = *std::max_element(sh, sh + L);
        float sum = 0.f;
        for (int64_t j = 0; j < L; ++j) sum += (sh[j] = std::exp(sh[j] - m));
        l[h] = sum;
    }
    std::fill(o, o + nh * Dv, 0.f);
    for (int64_t j = 0; j < L; ++j) {
        const T* r = seq.row(j);
        for (int64_t d = 0; d < Dv; ++d) row[d] = static_cast<float>(r[d]);
        for (int64_t h = 0; h < nh; ++h)
            for (int64_t d = 0; d < Dv; ++d) o[h * Dv + d] += scores[h * L + j] * row[d];
    }
}

#if defined(__AVX512F__)
// ---- AVX-512 path: D and Dv multiples of 16 ----------------------------------
// The rows stream through in spans of kSpan: a span is widened to float32 once
// (kf [kSpan, D], 36 KiB at D = 576: stays in L1 while the item's heads use it),
// then scored against every head of the item in 4 x 4 register tiles, folded into
// each head's running softmax (max, denominator), and accumulated into o [heads, Dv]
// in 4-head x 64-column register tiles. One pass over the cache, as in flash decoding;
// the running max rescales what came before, so nothing is exponentiated above 0.

using tokenmill::exp_shifted_sum16;
using tokenmill::load16;
using tokenmill::max16;
using tokenmill::store16;

// Measured (bf16, D 576, 2 threads, 128 heads): 16 rows beat 8 (twice the rescales of o)
// by 25-40% and 32 (kf, 72 KiB, no longer fits L1) by 0-25%.
constexpr int64_t kSpan = 16;  // rows per span
constexpr int kValueChunks = 4;  // 16-column chunks of the value per register tile: 4 heads x 4 = 16 accumulators

// Four vectors -> one whose 128-bit lane k holds (sum of a's lane k, b's, c's, d's).
inline __m512 fold4(__m512 a, __m512 b, __m512 c, __m512 d) {
    // Per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3), then the two halves of each pair added.
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    return _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Scores of 4 heads x 4 rows, s[h * ld + j] = dot(q[h], k[j]): q and k are 4 rows each,
// D floats apart. The 16 dot products end as 16 vectors, summed across lanes together
// (about 3 shuffles/adds per score instead of a full reduction each).
inline void scores_4x4(const float* q, const float* k, int64_t D, float* s, int64_t ld) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h)
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) acc[h][j] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
        __m512 kv[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) kv[j] = _mm512_loadu_ps(k + j * D + d);
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) {
            const __m512 qv = _mm512_loadu_ps(q + h * D + d);
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) acc[h][j] = _mm512_fmadd_ps(qv, kv[j], acc[h][j]);
        }
    }
    // x[h]: head h's four rows, partly summed (one partial sum per 128-bit lane).
    const __m512 x0 = fold4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
    const __m512 x1 = fold4(acc[1][0], acc[1][1], acc[1][2], acc[1][3]);
    const __m512 x2 = fold4(acc[2][0], acc[2][1], acc[2][2], acc[2][3]);
    const __m512 x3 = fold4(acc[3][0], acc[3][1], acc[3][2], acc[3][3]);
    const __m512 x01 = _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 x23 = _mm512_add_ps(_mm512_shuffle_f32x4(x2, x3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(x2, x3, _MM_SHUFFLE(3, 2, 3, 2)));
    // 128-bit lane h: head h's four scores.
    const __m512 sums = _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0)),
                                      _mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm_storeu_ps(s, _mm512_castps512_ps128(sums));
    _mm_storeu_ps(s + ld, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(s + 2 * ld, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(s + 3 * ld, _mm512_extractf32x4_ps(sums, 3));
}

// Folds one head's span of scores s[0, n) into its running softmax (max m, denominator l):
// s becomes exp(s - m_new); returns exp(m_old - m_new), the factor that rescales
// what the head accumulated before (0 on the first span, where m_old = -inf).
inline float softmax_span(float* s, int64_t n, float& m, float& l) {
    const float m_new = std::max(m, max16(s, n));
    const float corr = std::exp(m - m_new);
    l = l * corr + exp_shifted_sum16(s, n, m_new);
    m = m_new;
    return corr;
}

// 4 heads x 16C columns of the value: o[h] = o[h] * corr[h] + sum_{j < n} p[h * ld_p + j] * v[j * D + :16C].
template <int C>
inline void values_4xC(const float* p, int64_t ld_p, const float* v, int64_t D, int64_t n, const float* corr,
                       float* o, int64_t ld_o) {
    __m512 acc[4][C];
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
        const __m512 c = _mm512_set1_ps(corr[h]);
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i) acc[h][i] = _mm512_mul_ps(_mm512_loadu_ps(o + h * ld_o + 16 * i), c);
    }
    for (int64_t j = 0; j < n; ++j) {
        __m512 vv[C];
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i) vv[i] = _mm512_loadu_ps(v + j * D + 16 * i);
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) {
            const __m512 ph = _mm512_set1_ps(p[h * ld_p + j]);
#pragma GCC unroll 8
            for (int i = 0; i < C; ++i) acc[h][i] = _mm512_fmadd_ps(ph, vv[i], acc[h][i]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h)
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i) _mm512_storeu_ps(o + h * ld_o + 16 * i, acc[h][i]);
}

// The last chunks of a row (fewer than kValueChunks): values_4xC<rem>.
template <int C>
inline void values_tail(int rem, const float* p, int64_t ld_p, const float* v, int64_t D, int64_t n,
                        const float* corr, float* o, int64_t ld_o) {
    if constexpr (C > 0) {
        if (rem == C) return values_4xC<C>(p, ld_p, v, D, n, corr, o, ld_o);
        values_tail<C - 1>(rem, p, ld_p, v, D, n, corr, o, ld_o);
    }
}

// Software prefetch of the next span's rows into L2, a few lines after each score tile
// of the current span (all at once would stall on the line fill buffers). A span may
// cross into a block anywhere in the cache, where the hardware prefetcher, which
// follows addresses, cannot go. Measured with caches not in L3 (12 layers' caches in
// turn, bf16, block_size 16): 3-8% faster than without.
template <typename T>
class SpanPrefetch {
  public:
    // Rows s0 .. s0 + kSpan of the sequence (those below L), from their first line.
    void start(const SeqRows<T>& seq, int64_t s0, int64_t L) {
        rows_left_ = std::max<int64_t>(0, std::min(kSpan, L - s0));
        for (int64_t j = 0; j < rows_left_; ++j) rows_[j] = reinterpret_cast<const char*>(seq.row(s0 + j));
        lines_per_row_ = (seq.D * static_cast<int64_t>(sizeof(T)) + 63) / 64;
        row_ = 0, line_ = 0;
    }
    int64_t lines() const { return rows_left_ * lines_per_row_; }
    // The next `count` lines (fewer at the end of the span).
    void step(int64_t count) {
        for (; count > 0 && row_ < rows_left_; --count) {
            _mm_prefetch(rows_[row_] + 64 * line_, _MM_HINT_T1);
            if (++line_ == lines_per_row_) line_ = 0, ++row_;
        }
    }

  private:
    const char* rows_[kSpan];
    int64_t rows_left_ = 0, lines_per_row_ = 1, row_ = 0, line_ = 0;
};

// One item, hp heads (a multiple of 4; qf [hp, D], scaled, padding heads zero) over L rows.
// Writes o [hp, Dv] (unnormalised) and l [hp] (softmax denominators).
// Scratch: kf [kSpan, D], p [hp, kSpan], m and corr [hp].
template <typename T>
void attend_item_avx512(const float* qf, int64_t hp, const SeqRows<T>& seq, int64_t L, int64_t Dv, float* kf,
                        float* p, float* m, float* corr, float* o, float* l) {
    const int64_t D = seq.D;
    std::fill(o, o + hp * Dv, 0.f);
    std::fill(m, m + hp, -std::numeric_limits<float>::infinity());
    std::fill(l, l + hp, 0.f);
    SpanPrefetch<T> prefetch;
    for (int64_t s0 = 0; s0 < L; s0 += kSpan) {
        const int64_t n = std::min(kSpan, L - s0), n4 = (n + 3) / 4 * 4;
        for (int64_t j = 0; j < n; ++j) {  // widen the span once, for every head
            const T* r = seq.row(s0 + j);
            for (int64_t d = 0; d < D; d += 16) _mm512_storeu_ps(kf + j * D + d, load16(r + d));
        }
        std::fill(kf + n * D, kf + n4 * D, 0.f);  // rows up to the 4-row tile: scored, never used
        prefetch.start(seq, s0 + kSpan, L);
        const int64_t tiles = hp / 4 * (n4 / 4), per_tile = (prefetch.lines() + tiles - 1) / tiles;
        for (int64_t h = 0; h < hp; h += 4)
            for (int64_t j = 0; j < n4; j += 4) {
                scores_4x4(qf + h * D, kf + j * D, D, p + h * kSpan + j, kSpan);
                prefetch.step(per_tile);
            }
        for (int64_t h = 0; h < hp; ++h) corr[h] = softmax_span(p + h * kSpan, n, m[h], l[h]);
        const int64_t chunks = Dv / 16, full = chunks / kValueChunks * kValueChunks;
        for (int64_t h = 0; h < hp; h += 4) {
            for (int64_t c = 0; c < full; c += kValueChunks)
                values_4xC<kValueChunks>(p + h * kSpan, kSpan, kf + 16 * c, D, n, corr + h, o + h * Dv + 16 * c, Dv);
            values_tail<kValueChunks - 1>(static_cast<int>(chunks - full), p + h * kSpan, kSpan, kf + 16 * full, D, n,
                                          corr + h, o + h * Dv + 16 * full, Dv);
        }
    }
}
#endif

// Whether the AVX-512 path takes this dtype and shape.
template <typename T>
bool use_avx512(int64_t D, int64_t Dv) {
#if defined(__AVX512F__)
    return tokenmill::has_vec16<T> && D % 16 == 0 && Dv % 16 == 0;
#else
    (void)D, (void)Dv;
    return false;
#endif
}

// Heads per work item at most: bounds the scratch (qf and o, 64 heads: 272 KiB at D 576,
// in L2). Measured at 128 heads: 64 beats 32 by 7-17% (each span widened once for twice the
// heads), and 16 is 10-20% slower than 32.
constexpr int64_t kMaxItemHeads = 64;

// Heads per work item: as many as possible (each cache row is widened and read once
// per item), a multiple of 4 (the register tiles; H itself when smaller), and few
// enough that the items share out evenly over the threads: their count a multiple of
// the thread count, or at least 4 per thread (T = 1 on 2 threads: two halves of the heads).
inline int64_t heads_per_item(int64_t T, int64_t H, int64_t threads) {
    if (H <= 4) return H;
    int64_t per = 4;
    for (int64_t tiles = (H + kMaxItemHeads - 1) / kMaxItemHeads; tiles <= (H + 3) / 4; ++tiles) {
        per = ((H + tiles - 1) / tiles + 3) / 4 * 4;
        const int64_t items = T * ((H + per - 1) / per);
        if (items % threads == 0 || items >= 4 * threads) break;
    }
    return per;
}

template <typename T>
void mla_attention(const T* q, const T* cache, const int64_t* tables, const int64_t* lens, T* out, int64_t Tn,
                   int64_t H, int64_t D, int64_t Dv, int64_t max_blocks, int64_t block_size, int64_t block_stride,
                   float scale) {
    const int64_t hpi = heads_per_item(Tn, H, at::get_num_threads());
    const int64_t tiles = (H + hpi - 1) / hpi, hp = (hpi + 3) / 4 * 4;
    const int64_t longest = *std::max_element(lens, lens + Tn);
    const bool fast = use_avx512<T>(D, Dv);
    at::parallel_for(0, Tn * tiles, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> qf(hp * D), o(hp * Dv), l(hp), m(hp), corr(hp);
        std::vector<float> kf, p, scores, row;
        if (fast) {
#if defined(__AVX512F__)
            kf.resize(kSpan * D), p.resize(hp * kSpan);
#endif
        } else {
            scores.resize(hpi * longest), row.resize(D);
        }
        for (int64_t w = begin; w < end; ++w) {
            const int64_t t = w / tiles, h0 = w % tiles * hpi, nh = std::min(hpi, H - h0);
            const T* qt = q + (t * H + h0) * D;
            for (int64_t i = 0; i < nh * D; ++i) qf[i] = static_cast<float>(qt[i]) * scale;
            const SeqRows<T> seq{cache, tables + t * max_blocks, block_size, block_stride, D};
            T* ot = out + (t * H + h0) * Dv;
#if defined(__AVX512F__)
            if constexpr (tokenmill::has_vec16<T>) {
                if (fast) {
                    const int64_t nh4 = (nh + 3) / 4 * 4;
                    std::fill(qf.begin() + nh * D, qf.begin() + nh4 * D, 0.f);  // padding heads: scores 0, unused
                    attend_item_avx512(qf.data(), nh4, seq, lens[t], Dv, kf.data(), p.data(), m.data(), corr.data(),
                                       o.data(), l.data());
                    for (int64_t h = 0; h < nh; ++h) {
                        const __m512 inv = _mm512_set1_ps(1.f / l[h]);
                        for (int64_t d = 0; d < Dv; d += 16)
                            store16(ot + h * Dv + d, _mm512_mul_ps(_mm512_loadu_ps(o.data() + h * Dv + d), inv));
                    }
                    continue;
                }
            }
#endif
            attend_item_portable(qf.data(), nh, seq, lens[t], Dv, scores.data(), row.data(), o.data(), l.data());
            for (int64_t h = 0; h < nh; ++h)
                for (int64_t d = 0; d < Dv; ++d) ot[h * Dv + d] = static_cast<T>(o[h * Dv + d] / l[h]);
        }
    });
}

}  // namespace

torch::Tensor tokenmill::paged_mla_attention(torch::Tensor q, torch::Tensor cache, torch::Tensor block_tables,
                                             torch::Tensor context_lens, int64_t block_size, double scale,
                                             int64_t v_dim) {
    TORCH_CHECK(q.dim() == 3 && cache.dim() == 4, "q [T,H,D], cache [num_blocks,1,block_size,D]");
    TORCH_CHECK(q.scalar_type() == cache.scalar_type(), "q and the cache must share a dtype");
    TORCH_CHECK(block_tables.scalar_type() == torch::kLong && context_lens.scalar_type() == torch::kLong,
                "block_tables and context_lens must be int64");
    TORCH_CHECK(q.device().is_cpu() && cache.device().is_cpu(), "CPU tensors only");
    q = q.contiguous();
    block_tables = block_tables.contiguous();
    context_lens = context_lens.contiguous();
    const int64_t T = q.size(0), H = q.size(1), D = q.size(2);
    TORCH_CHECK(cache.size(1) == 1 && cache.size(3) == D, "the cache must hold one latent head of q's width D");
    TORCH_CHECK(v_dim >= 1 && v_dim <= D, "v_dim must be in [1, D]");
    TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == T && context_lens.dim() == 1 &&
                    context_lens.size(0) == T,
                "one block table and length per query row");
    TORCH_CHECK(block_size >= 1 && cache.size(2) == block_size, "the cache must hold blocks of block_size slots");
    // The kernel reads each block as one run of block_size contiguous rows.
    TORCH_CHECK(cache.stride(3) == 1 && cache.stride(2) == D, "each cache [block_size, D] run must be contiguous");
    // Every block a row reads must lie inside the cache: a bad table would read out of bounds.
    const int64_t max_blocks = block_tables.size(1), num_blocks = cache.size(0);
    const int64_t* lens = context_lens.data_ptr<int64_t>();
    const int64_t* tables = block_tables.data_ptr<int64_t>();
    for (int64_t t = 0; t < T; ++t) {
        TORCH_CHECK(lens[t] >= 1 && lens[t] <= max_blocks * block_size, "context length out of range");
        for (int64_t i = 0; i < (lens[t] + block_size - 1) / block_size; ++i)
            TORCH_CHECK(tables[t * max_blocks + i] >= 0 && tables[t * max_blocks + i] < num_blocks,
                        "block id out of range");
    }
    auto out = torch::empty({T, H, v_dim}, q.options());
    if (T == 0 || H == 0) return out;
    AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::BFloat16, q.scalar_type(), "paged_mla_attention", [&] {
        mla_attention<scalar_t>(q.data_ptr<scalar_t>(), cache.data_ptr<scalar_t>(), tables, lens,
                                out.data_ptr<scalar_t>(), T, H, D, v_dim, max_blocks, block_size, cache.stride(0),
                                static_cast<float>(scale));
    });
    return out;
}
