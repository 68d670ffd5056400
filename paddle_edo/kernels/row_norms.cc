// The monitor's row-gradient summary of a logged step, for several tables at once. A sparse gradient
// keeps one entry per lookup; a row's gradient is the sum of its entries. Per group of tables that
// looked up the same rows, this finds the distinct rows, sums each row's entries per table, takes the L2
// norms and computes their mean, max and 99th percentile: one call instead of some thirty numpy calls,
// each a pass over all entries with its own temporary. The entries are read in lookup order (sequential
// reads, which the hardware prefetches: gradients are cold in cache when the monitor runs) and added into
// their row's sum, which stays in cache. Called through ctypes (no Paddle tensors), which lets go of the
// GIL while it runs. monitor/row_gradients.py keeps the numpy reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace {

// The distinct rows other than padding (ascending), and for each lookup the index of its row among them
// (-1: padding). An index over the rows' span when it is not much larger than the lookups (small
// tables, or ids that are frequent), a sort and binary searches otherwise.
void DistinctRows(const int64_t* row, int64_t length, int64_t padding, std::vector<int64_t>* distinct,
                  std::vector<int64_t>* slot) {
  int64_t low = std::numeric_limits<int64_t>::max(), high = std::numeric_limits<int64_t>::min(), kept = 0;
  for (int64_t i = 0; i < length; ++i) {
    if (row[i] == padding) continue;
    low = std::min(low, row[i]);
    high = std::max(high, row[i]);
    ++kept;
  }
  distinct->clear();
  slot->assign(length, -1);
  if (kept == 0) return;
  if (static_cast<uint64_t>(high) - static_cast<uint64_t>(low) < static_cast<uint64_t>(2 * kept + 4096)) {
    std::vector<int64_t> index(high - low + 1, -1);  // index[r - low]: row r's place among the distinct rows
    for (int64_t i = 0; i < length; ++i) {
      if (row[i] != padding) index[row[i] - low] = 0;
    }
    for (int64_t r = 0; r <= high - low; ++r) {
      if (index[r] == 0) {
        index[r] = static_cast<int64_t>(distinct->size());
        distinct->push_back(low + r);
      }
    }
    for (int64_t i = 0; i < length; ++i) {
      if (row[i] != padding) (*slot)[i] = index[row[i] - low];
    }
    return;
  }
  for (int64_t i = 0; i < length; ++i) {
    if (row[i] != padding) distinct->push_back(row[i]);
  }
  std::sort(distinct->begin(), distinct->end());
  distinct->erase(std::unique(distinct->begin(), distinct->end()), distinct->end());
  for (int64_t i = 0; i < length; ++i) {
    if (row[i] != padding) {
      (*slot)[i] = std::lower_bound(distinct->begin(), distinct->end(), row[i]) - distinct->begin();
    }
  }
}

// The L2 norm of each distinct row's summed entries: float32 sums in lookup order (entries read one
// after another), squares in double.
void RowNorms(const float* value, int64_t width, const std::vector<int64_t>& slot, int64_t rows,
              std::vector<float>* sums, std::vector<float>* norms) {
  sums->assign(rows * width, 0.0f);
  float* __restrict__ sum = sums->data();
  const int64_t length = static_cast<int64_t>(slot.size());
  for (int64_t i = 0; i < length; ++i) {
    if (slot[i] < 0) continue;
    float* __restrict__ target = sum + slot[i] * width;
    const float* __restrict__ entry = value + i * width;
    for (int64_t d = 0; d < width; ++d) target[d] += entry[d];
  }
  norms->resize(rows);
  for (int64_t s = 0; s < rows; ++s) {
    double squares = 0.0;
    for (int64_t d = 0; d < width; ++d) squares += static_cast<double>(sum[s * width + d]) * sum[s * width + d];
    (*norms)[s] = static_cast<float>(std::sqrt(squares));
  }
}

}  // namespace

// groups: tables sharing their looked-up rows; group g has lengths[g] entries, rows[g] (int64) and, per
// column (table) c, values[g * columns + c] ([lengths[g], widths[c]] float32); paddings[g] (-1: none) is
// dropped. Out, packed group after group (offsets: the running sum of distinct[]):
//   out_rows: the distinct rows, ascending; distinct[g]: how many;
//   ranked[u * columns + c]: column c's norms, finite ones first (in no set order); ranked_rows: their
//   rows; good[g * columns + c]: finite norms; figures[(g * columns + c) * 3 + {0, 1, 2}]: their mean,
//   max and 99th percentile as np.percentile gives it (linear interpolation: the difference of the two
//   ranks in float32, the rest in double), NaN when there is none.
// Entries are summed in float32 in their order of lookup (as numpy's add.reduceat over a stable sort),
// squares in double. Returns the number of distinct rows of all groups.
extern "C" int64_t edo_summarize_groups(int64_t groups, int64_t columns, const int64_t* const* rows,
                                        const int64_t* lengths, const int64_t* paddings,
                                        const float* const* values, const int64_t* widths, int64_t* out_rows,
                                        int64_t* distinct, float* ranked, int64_t* ranked_rows, int64_t* good,
                                        double* figures) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int64_t offset = 0;
  std::vector<int64_t> distinct_rows, slot, by_norm;
  std::vector<float> sums, norms;
  for (int64_t g = 0; g < groups; ++g) {
    DistinctRows(rows[g], lengths[g], paddings[g], &distinct_rows, &slot);
    const int64_t segments = static_cast<int64_t>(distinct_rows.size());
    std::copy(distinct_rows.begin(), distinct_rows.end(), out_rows + offset);
    distinct[g] = segments;
    for (int64_t c = 0; c < columns; ++c) {
      RowNorms(values[g * columns + c], widths[c], slot, segments, &sums, &norms);
      by_norm.resize(segments);
      std::iota(by_norm.begin(), by_norm.end(), 0);
      const auto finite_end = std::partition(by_norm.begin(), by_norm.end(),
                                             [&norms](int64_t s) { return std::isfinite(norms[s]); });
      const int64_t finite = finite_end - by_norm.begin();
      good[g * columns + c] = finite;
      double* figure = figures + (g * columns + c) * 3;
      if (finite == 0) {
        figure[0] = figure[1] = figure[2] = nan;
      } else {  // the two ranks the percentile reads, found in linear time (no full sort)
        const auto by_value = [&norms](int64_t a, int64_t b) { return norms[a] < norms[b]; };
        const double position = static_cast<double>(finite - 1) * 0.99;
        const int64_t low = static_cast<int64_t>(position);
        std::nth_element(by_norm.begin(), by_norm.begin() + low, finite_end, by_value);
        const float at_low = norms[by_norm[low]];
        float at_high = at_low, maximum = at_low;
        if (low + 1 < finite) {
          at_high = norms[*std::min_element(by_norm.begin() + low + 1, finite_end, by_value)];
          maximum = norms[*std::max_element(by_norm.begin() + low + 1, finite_end, by_value)];
        }
        double total = 0.0;
        for (int64_t u = 0; u < finite; ++u) total += norms[by_norm[u]];
        figure[0] = total / static_cast<double>(finite);
        figure[1] = maximum;
        figure[2] = static_cast<double>(at_low) + static_cast<double>(at_high - at_low) * (position - low);
      }
      float* column_ranked = ranked + offset * columns + c;
      for (int64_t u = 0; u < segments; ++u) {
        column_ranked[u * columns] = norms[by_norm[u]];
        ranked_rows[(offset + u) * columns + c] = out_rows[offset + by_norm[u]];
      }
    }
    offset += segments;
  }
  return offset;
}

// The update-to-weight ratio's two halves, for several float32 tables at once: table t's rows[t]
// (counts[t] of them, distinct) of its weight ([*, widths[t]], row-major), packed table after table.
// edo_save_rows copies them before the optimizer step; edo_update_ratios then reads the weights in place
// and gives each table's ||after - before|| / ||before|| (squares in double; 0 when before is all zero).
extern "C" void edo_save_rows(int64_t tables, const float* const* weights, const int64_t* widths,
                              const int64_t* const* rows, const int64_t* counts, float* saved) {
  for (int64_t t = 0; t < tables; ++t) {
    const int64_t width = widths[t];
    for (int64_t i = 0; i < counts[t]; ++i, saved += width) {
      const float* row = weights[t] + rows[t][i] * width;
      std::copy(row, row + width, saved);
    }
  }
}

extern "C" void edo_update_ratios(int64_t tables, const float* const* weights, const int64_t* widths,
                                  const int64_t* const* rows, const int64_t* counts, const float* saved,
                                  double* ratios) {
  for (int64_t t = 0; t < tables; ++t) {
    const int64_t width = widths[t];
    double change = 0.0, weight = 0.0;
    for (int64_t i = 0; i < counts[t]; ++i, saved += width) {
      const float* row = weights[t] + rows[t][i] * width;
      for (int64_t d = 0; d < width; ++d) {
        const float difference = row[d] - saved[d];
        change += static_cast<double>(difference) * difference;
        weight += static_cast<double>(saved[d]) * saved[d];
      }
    }
    ratios[t] = weight > 0.0 ? std::sqrt(change / weight) : 0.0;
  }
}

// The monitor's running median of each table's largest row-gradient norms (its norm-spike alert): for
// entry i, table tables[i] with this step's maximum maxima[i], medians[i] is the median of the table's
// last min(counts, window) maxima (history[table * window + ...], a ring; NaN before `least` of them);
// then maxima[i] takes the ring's oldest place.
extern "C" void edo_running_medians(int64_t entries, const int64_t* tables, const double* maxima, int64_t window,
                                    int64_t least, double* history, int64_t* counts, double* medians) {
  std::vector<double> kept;
  for (int64_t i = 0; i < entries; ++i) {
    double* ring = history + tables[i] * window;
    int64_t& count = counts[tables[i]];
    const int64_t filled = std::min(count, window);
    medians[i] = std::numeric_limits<double>::quiet_NaN();
    if (count >= least && filled > 0) {
      kept.assign(ring, ring + filled);
      const auto middle = kept.begin() + filled / 2;
      std::nth_element(kept.begin(), middle, kept.end());
      const double upper = *middle;
      const double lower = filled % 2 ? upper : *std::max_element(kept.begin(), middle);
      medians[i] = (lower + upper) / 2;
    }
    ring[count % window] = maxima[i];
    ++count;
  }
}

// Coverage: marks the rows that tables updated. Part p is counts[p] rows (rows: packed part after part)
// of table tables[p], whose flags are flags[starts[table] ...][sizes[table]], at step steps[p] (parts in
// step order). A row not flagged before is flagged, and its table's count grows and its last growth
// step becomes the step. Returns -1, or (marking nothing) the position of the first row outside its table.
extern "C" int64_t edo_mark_rows(int64_t parts, const int64_t* tables, const int64_t* counts, const int64_t* steps,
                                 const int64_t* rows, const int64_t* starts, const int64_t* sizes, uint8_t* flags,
                                 int64_t* table_counts, int64_t* last_growth) {
  int64_t at = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const uint64_t size = static_cast<uint64_t>(sizes[tables[p]]);
    for (int64_t i = 0; i < counts[p]; ++i, ++at) {
      if (static_cast<uint64_t>(rows[at]) >= size) return at;  // negative rows wrap around to huge ones
    }
  }
  at = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t table = tables[p];
    uint8_t* table_flags = flags + starts[table];
    int64_t fresh = 0;
    for (int64_t i = 0; i < counts[p]; ++i, ++at) {
      uint8_t& flag = table_flags[rows[at]];
      fresh += !flag;
      flag = 1;
    }
    if (fresh) {
      table_counts[table] += fresh;
      last_growth[table] = std::max(last_growth[table], steps[p]);
    }
  }
  return -1;
}
