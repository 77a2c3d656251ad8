// How paged_decode_attention.cpp splits a step's query rows into work: runs of one
// sequence's consecutive rows, (run, KV head) items, and each thread's share of them.
// Which thread computes an item, and how rows are grouped into runs, change no result:
// every query row's output is computed the same way whatever its run (see the kernel).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace tokenmill::attention_work {

// Rows per run at most: R x G query rows share each K/V row read. A longer stretch
// of one sequence's rows is cut into near-equal runs, and a short one into at least
// min_runs (split_runs), so that a batch-1 verification (2-8 rows) still gives every
// thread work.
constexpr int64_t kRunRows = 4;

// Splits the B rows into runs [first, end). Row e continues the stretch of rows
// before it when lens[e] = lens[e - 1] + 1 and row e's block table agrees with the
// stretch's first row's over every block row e reads (so that table serves them
// all; in the engine they are one sequence's consecutive tokens). A row's softmax
// and output use only its own context whatever the grouping (its scores past it,
// taken with the run's longer rows, are dropped), so rows of different sequences
// that share those blocks would still be exact.
inline std::vector<std::pair<int64_t, int64_t>> split_runs(const int64_t* tables, const int64_t* lens, int64_t B,
                                                           int64_t max_blocks, int64_t block_size,
                                                           int64_t min_runs) {
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (int64_t b = 0; b < B;) {
        int64_t end = b + 1;
        while (end < B && lens[end] == lens[end - 1] + 1 &&
               std::equal(tables + end * max_blocks,
                          tables + end * max_blocks + (lens[end] + block_size - 1) / block_size,
                          tables + b * max_blocks))
            ++end;
        const int64_t pieces = std::max((end - b + kRunRows - 1) / kRunRows, std::min(end - b, min_runs));
        for (int64_t i = 0; i < pieces; ++i)  // near-equal runs: sizes differ by at most one row
            runs.emplace_back(b + (end - b) * i / pieces, b + (end - b) * (i + 1) / pieces);
        b = end;
    }
    return runs;
}

// One work item: the rows [first, last) of a run with one KV head.
struct WorkItem {
    int64_t first, last, head;
};

// Every (run, KV head), in row order.
inline std::vector<WorkItem> work_items(const std::vector<std::pair<int64_t, int64_t>>& runs, int64_t Hkv) {
    std::vector<WorkItem> items;
    items.reserve(runs.size() * Hkv);
    for (const auto& [first, last] : runs)
        for (int64_t h = 0; h < Hkv; ++h) items.push_back({first, last, h});
    return items;
}

// The items of each of `parts` threads, of near-equal cost (rows x longest context,
// plus a fixed cost per item), where the items' costs differ by orders of magnitude
// (a causal prefill chunk's rows, a long context beside short ones). Many items: cut
// in row order into contiguous shares, so a thread reads neighbouring rows' K/V as
// with an even split. Few (a batch-1 verification's 6): the dearest first, each to
// the least loaded share. Which thread computes an item changes no result.
inline std::vector<std::vector<int64_t>> shares(const std::vector<WorkItem>& items, const int64_t* lens,
                                                int64_t parts) {
    constexpr int64_t kItemCost = 64;  // per item, in rows' worth of context: scaling q, writing out
    const int64_t n = static_cast<int64_t>(items.size());
    std::vector<int64_t> cost(n);
    for (int64_t i = 0; i < n; ++i) cost[i] = (items[i].last - items[i].first) * lens[items[i].last - 1] + kItemCost;
    std::vector<std::vector<int64_t>> out(parts);
    if (n > 8 * parts) {
        const int64_t total = std::accumulate(cost.begin(), cost.end(), int64_t{0});
        int64_t before = 0;  // cost of the items before i
        for (int64_t i = 0; i < n; before += cost[i++])
            out[std::min(parts - 1, before * parts / total)].push_back(i);  // the share its cost starts in
        return out;
    }
    std::vector<int64_t> order(n), load(parts, 0);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cost[a] > cost[b]; });
    for (int64_t i : order) {
        const int64_t p = std::min_element(load.begin(), load.end()) - load.begin();
        out[p].push_back(i);
        load[p] += cost[i];
    }
    return out;
}

}  // namespace tokenmill::attention_work
