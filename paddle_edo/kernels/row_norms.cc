// The monitor's row-gradient summary of a logged step, for several tables at once. A sparse gradient
// keeps one entry per lookup; a row's gradient is the sum of its entries. Per group of tables that
// looked up the same rows, this sorts the entries by row, sums each row's entries per table, takes the
// L2 norms, ranks them and computes their mean, max and 99th percentile: one call instead of some thirty
// numpy calls, each a pass over all entries with its own temporary. Called through ctypes (no Paddle
// tensors), which lets go of the GIL while it runs. monitor/row_gradients.py keeps the numpy reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

namespace {

// np.percentile(finite ascending norms, 99) with its default linear interpolation, computed as numpy
// computes it from float32 norms (the difference in float32, the rest in double).
double Percentile99(const float* ascending, int64_t count) {
  const double position = static_cast<double>(count - 1) * 0.99;
  const int64_t low = static_cast<int64_t>(position);
  const int64_t high = std::min(low + 1, count - 1);
  const float difference = ascending[high] - ascending[low];
  return static_cast<double>(ascending[low]) + static_cast<double>(difference) * (position - low);
}

// The positions of the lookups other than padding, sorted by row and, within a row, in lookup order. A
// counting sort when the rows span a range not much larger than the lookups (small tables, or ids that
// are frequent), a comparison sort otherwise.
void SortByRow(const int64_t* row, int64_t length, int64_t padding, std::vector<int64_t>* order) {
  int64_t low = std::numeric_limits<int64_t>::max(), high = std::numeric_limits<int64_t>::min(), kept = 0;
  for (int64_t i = 0; i < length; ++i) {
    if (row[i] == padding) continue;
    low = std::min(low, row[i]);
    high = std::max(high, row[i]);
    ++kept;
  }
  order->resize(kept);
  if (kept == 0) return;
  if (static_cast<uint64_t>(high) - static_cast<uint64_t>(low) < static_cast<uint64_t>(2 * kept + 4096)) {
    std::vector<int64_t> next(high - low + 2, 0);  // next[r - low]: where row r's next lookup goes
    for (int64_t i = 0; i < length; ++i) {
      if (row[i] != padding) ++next[row[i] - low + 1];
    }
    std::partial_sum(next.begin(), next.end(), next.begin());
    for (int64_t i = 0; i < length; ++i) {
      if (row[i] != padding) (*order)[next[row[i] - low]++] = i;
    }
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> entries;  // (row, position)
  entries.reserve(kept);
  for (int64_t i = 0; i < length; ++i) {
    if (row[i] != padding) entries.emplace_back(row[i], i);
  }
  std::sort(entries.begin(), entries.end());
  for (int64_t i = 0; i < kept; ++i) (*order)[i] = entries[i].second;
}

// The sum of segment s's entries of a one-wide table, in lookup order.
float SegmentSum(const float* value, const std::vector<int64_t>& order, const std::vector<int64_t>& starts,
                 int64_t s) {
  float sum = value[order[starts[s]]];
  for (int64_t i = starts[s] + 1; i < starts[s + 1]; ++i) sum += value[order[i]];
  return sum;
}

// The L2 norm of segment s's summed entries (float32 sums in lookup order, squares in double).
float SegmentNorm(const float* value, int64_t width, const std::vector<int64_t>& order,
                  const std::vector<int64_t>& starts, int64_t s, std::vector<float>* buffer) {
  float* __restrict__ sum = buffer->data();
  const float* first = value + order[starts[s]] * width;
  for (int64_t d = 0; d < width; ++d) sum[d] = first[d];
  for (int64_t i = starts[s] + 1; i < starts[s + 1]; ++i) {
    const float* __restrict__ entry = value + order[i] * width;
    for (int64_t d = 0; d < width; ++d) sum[d] += entry[d];
  }
  double squares = 0.0;
  for (int64_t d = 0; d < width; ++d) squares += static_cast<double>(sum[d]) * sum[d];
  return static_cast<float>(std::sqrt(squares));
}

}  // namespace

// groups: tables sharing their looked-up rows; group g has lengths[g] entries, rows[g] (int64) and, per
// column (table) c, values[g * columns + c] ([lengths[g], widths[c]] float32); paddings[g] (-1: none) is
// dropped. Out, packed group after group (offsets: the running sum of distinct[]):
//   out_rows: the distinct rows, ascending; distinct[g]: how many;
//   ranked[u * columns + c]: column c's norms, finite ones ascending first; ranked_rows: their rows;
//   good[g * columns + c]: finite norms; figures[(g * columns + c) * 3 + {0, 1, 2}]: their mean, max and
//   99th percentile (NaN when there is none).
// Entries are summed in float32 in their order of lookup (as numpy's add.reduceat over a stable sort),
// squares in double. Returns the number of distinct rows of all groups.
extern "C" int64_t edo_summarize_groups(int64_t groups, int64_t columns, const int64_t* const* rows,
                                        const int64_t* lengths, const int64_t* paddings,
                                        const float* const* values, const int64_t* widths, int64_t* out_rows,
                                        int64_t* distinct, float* ranked, int64_t* ranked_rows, int64_t* good,
                                        double* figures) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int64_t offset = 0;
  std::vector<int64_t> order, segment_starts, by_norm;
  std::vector<float> sum, norms;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t* row = rows[g];
    SortByRow(row, lengths[g], paddings[g], &order);
    segment_starts.clear();
    for (int64_t i = 0; i < static_cast<int64_t>(order.size()); ++i) {
      if (i == 0 || row[order[i]] != row[order[i - 1]]) {
        segment_starts.push_back(i);
        out_rows[offset + static_cast<int64_t>(segment_starts.size()) - 1] = row[order[i]];
      }
    }
    const int64_t segments = static_cast<int64_t>(segment_starts.size());
    segment_starts.push_back(static_cast<int64_t>(order.size()));
    distinct[g] = segments;
    for (int64_t c = 0; c < columns; ++c) {
      const int64_t width = widths[c];
      const float* value = values[g * columns + c];
      norms.resize(segments);
      if (width == 1) {
        for (int64_t s = 0; s < segments; ++s) norms[s] = std::fabs(SegmentSum(value, order, segment_starts, s));
      } else {
        sum.resize(width);
        for (int64_t s = 0; s < segments; ++s) norms[s] = SegmentNorm(value, width, order, segment_starts, s, &sum);
      }
      by_norm.resize(segments);
      std::iota(by_norm.begin(), by_norm.end(), 0);
      const auto finite_end = std::partition(by_norm.begin(), by_norm.end(),
                                             [&norms](int64_t s) { return std::isfinite(norms[s]); });
      std::sort(by_norm.begin(), finite_end, [&norms](int64_t a, int64_t b) { return norms[a] < norms[b]; });
      const int64_t finite = finite_end - by_norm.begin();
      float* column_ranked = ranked + offset * columns + c;
      for (int64_t u = 0; u < segments; ++u) {
        column_ranked[u * columns] = norms[by_norm[u]];
        ranked_rows[(offset + u) * columns + c] = out_rows[offset + by_norm[u]];
      }
      good[g * columns + c] = finite;
      double* figure = figures + (g * columns + c) * 3;
      if (finite == 0) {
        figure[0] = figure[1] = figure[2] = nan;
        continue;
      }
      std::vector<float> ascending(finite);
      double total = 0.0;
      for (int64_t u = 0; u < finite; ++u) {
        ascending[u] = column_ranked[u * columns];
        total += ascending[u];
      }
      figure[0] = total / static_cast<double>(finite);
      figure[1] = ascending[finite - 1];
      figure[2] = Percentile99(ascending.data(), finite);
    }
    offset += segments;
  }
  return offset;
}
