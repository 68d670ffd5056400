// Table-batched lookups: every fp32 table of an EmbeddingCollection in one forward op, and one backward op
// that applies each table's optimizer to the rows its batch touched, in place (no gradient tensor).
//
// Table t's ids are flat, in bags of lengths[t] ids per example (0: ragged, bounds[t] gives each example's
// start, as offsets do) and pooled by modes[t] (0: none, each id its own slot; 1: sum; 2: mean); an id equal
// to paddings[t] (negative: none) reads a zero row and trains nothing. The output is one [batch, width] tensor,
// table after table: D_t columns for a pooled table, L_t x D_t for an unpooled one.
//
// The backward sums each distinct row's gradients in the order its entries come (the order Paddle's
// embedding gradient accumulates them), then updates the row with the table's rule, exactly as Paddle's
// sparse optimizers update a row of merged gradient: SGD, Adagrad (per value), row-wise Adagrad (one
// accumulator per row, FBGEMM's EXACT_ROWWISE_ADAGRAD), lazy Adam, and row-wise Adam (FBGEMM's
// PARTIAL_ROWWISE_ADAM: the first moment per value, or none with beta1 = 0; the second moment per row, the
// mean of the row's squared gradient; bias-corrected from t = 1). Two of Paddle's ways are kept so that a
// fused table trains as a per-table one: its CPU SGD rounds p - lr * g once (a fused multiply-add) unless the
// width is a multiple of 8 (then generated AVX code rounds the product, then the difference), and its
// sparse Adam advances beta1^t and beta2^t before the step, so the first step's bias correction takes t = 2.
// The padding row is never updated (Paddle's sparse gradients update it, though no lookup ever reads it).
// Weight decay is L2 on the batch's rows (g + decay * w before the rule), as FBGEMM's L2 mode: Paddle's
// optimizers add theirs to a sparse gradient densely, so that every row moves every step.
//
// A low_precision table's rows take the same rules through edo_rows_update: it updates rows decoded out of
// the table, given their summed gradients, with the table's state indexed by row.
//
// A QAT table (fake_formats[t] >= 0) is read through fake quantization: each distinct row of its batch is
// encoded and decoded once (fake_quant.h), and its entries read those values; its gradient passes straight
// through to the fp32 master row, so the backward treats it as any other table.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "fake_quant.h"
#include "huge_pages.h"
#include "optimizer_states.h"
#include "prefetch.h"
#include "paddle/extension.h"

namespace {

enum Pooling { kNone = 0, kSum = 1, kMean = 2 };
enum Rule { kSgd = 0, kAdagrad = 1, kRowwiseAdagrad = 2, kAdam = 3, kRowwiseAdam = 4 };

// beta1^t and beta2^t one step on. Paddle's sparse Adam advances them before its step (so its first step
// corrects with t = 2), and the fused Adam keeps that; row-wise Adam, which has no Paddle twin, after.
void AdvanceStepCounts(float* pows, float beta1, float beta2) {
  pows[0] *= beta1;
  pows[1] *= beta2;
}

constexpr int64_t kPrefetchAhead = 4;      // examples ahead whose rows the forward asks for
constexpr int64_t kParallelEntries = 4096;  // below this many entries in all, threads cost more than they save

// What the forward and backward share: each table's rows, ids, bags and place in the output.
struct Tables {
  int64_t count = 0, batch = 0, width = 0, entries = 0;
  std::vector<float*> weight;
  std::vector<int64_t> rows, dim, length, padding, column;
  std::vector<int> mode;
  std::vector<const int64_t*> id, bound;
  std::vector<const float*> quantized;         // QAT tables: their batch's distinct rows, fake-quantized
  std::vector<const int64_t*> quantized_index;  // and, per entry, which of those rows it reads

  // The values entry j of table t reads.
  const float* Row(int64_t t, int64_t j) const {
    return quantized[t] != nullptr ? quantized[t] + quantized_index[t][j] * dim[t] : weight[t] + id[t][j] * dim[t];
  }

  // Bag b of table t holds entries [Start(t, b), Start(t, b + 1)).
  int64_t Start(int64_t t, int64_t b) const { return length[t] > 0 ? b * length[t] : bound[t][b]; }
  bool IsPadding(int64_t t, int64_t id) const { return padding[t] >= 0 && id == padding[t]; }
  // Where entry j (of bag b) of table t goes in an output row.
  int64_t Column(int64_t t, int64_t b, int64_t j) const {
    return mode[t] == kNone ? column[t] + (j - Start(t, b)) * dim[t] : column[t];
  }
};

Tables Describe(const std::vector<paddle::Tensor>& weights, const std::vector<paddle::Tensor>& ids,
                const std::vector<paddle::Tensor>& bounds, const std::vector<int64_t>& lengths,
                const std::vector<int>& modes, const std::vector<int64_t>& paddings, int64_t batch) {
  Tables tables;
  const int64_t count = static_cast<int64_t>(weights.size());
  PD_CHECK(count > 0, "a collection needs at least one table");
  PD_CHECK(static_cast<int64_t>(ids.size()) == count && static_cast<int64_t>(bounds.size()) == count &&
               static_cast<int64_t>(lengths.size()) == count && static_cast<int64_t>(modes.size()) == count &&
               static_cast<int64_t>(paddings.size()) == count,
           "one weight, ids, bounds, length, mode and padding per table");
  tables.count = count;
  tables.batch = batch;
  for (int64_t t = 0; t < count; ++t) {
    const paddle::Tensor& w = weights[t];
    PD_CHECK(w.is_cpu() && w.dtype() == paddle::DataType::FLOAT32 && w.shape().size() == 2,
             "table ", t, ": weights must be 2-D float32 on the CPU");
    PD_CHECK(ids[t].is_cpu() && ids[t].dtype() == paddle::DataType::INT64, "table ", t, ": ids must be int64 on the CPU");
    PD_CHECK(modes[t] >= kNone && modes[t] <= kMean, "table ", t, ": pooling mode ", modes[t], " is not 0, 1 or 2");
    tables.weight.push_back(const_cast<float*>(w.data<float>()));
    tables.rows.push_back(w.shape()[0]);
    tables.dim.push_back(w.shape()[1]);
    tables.length.push_back(lengths[t]);
    tables.mode.push_back(modes[t]);
    tables.padding.push_back(paddings[t]);
    tables.id.push_back(ids[t].data<int64_t>());
    const int64_t n = ids[t].numel();
    if (lengths[t] > 0) {
      PD_CHECK(n == batch * lengths[t], "table ", t, ": ", n, " ids are not ", batch, " bags of ", lengths[t]);
      tables.bound.push_back(nullptr);
    } else {
      PD_CHECK(modes[t] != kNone, "table ", t, ": ragged bags must be pooled");
      PD_CHECK(bounds[t].dtype() == paddle::DataType::INT64 && bounds[t].numel() == batch + 1,
               "table ", t, ": bounds must be int64 [batch + 1]");
      const int64_t* bound = bounds[t].data<int64_t>();
      PD_CHECK(bound[0] == 0 && bound[batch] == n, "table ", t, ": bounds must start at 0 and end at ", n);
      for (int64_t b = 0; b < batch; ++b) PD_CHECK(bound[b] <= bound[b + 1], "table ", t, ": bounds decrease at ", b);
      tables.bound.push_back(bound);
    }
    tables.quantized.push_back(nullptr);
    tables.quantized_index.push_back(nullptr);
    tables.column.push_back(tables.width);
    tables.width += modes[t] == kNone ? lengths[t] * tables.dim[t] : tables.dim[t];
    tables.entries += n;
  }
  return tables;
}

// The first id outside its table, as "table t: id X is outside [0, R)", or "" when all are inside.
std::string FirstBadId(const Tables& tables, const std::vector<paddle::Tensor>& ids) {
  for (int64_t t = 0; t < tables.count; ++t) {
    const int64_t n = ids[t].numel(), rows = tables.rows[t];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = tables.id[t][i];
      if ((id < 0 || id >= rows) && !tables.IsPadding(t, id)) {
        return "table " + std::to_string(t) + ": id " + std::to_string(id) + " is outside [0, " +
               std::to_string(rows) + ")";
      }
    }
  }
  return "";
}

inline void AddRow(float* out, const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) out[d] += row[d];
}

// One example's output row: every table's rows, pooled.
void LookUpExample(const Tables& tables, int64_t b, float* out) {
  for (int64_t t = 0; t < tables.count; ++t) {
    const int64_t dim = tables.dim[t], start = tables.Start(t, b), end = tables.Start(t, b + 1);
    float* slot = out + tables.column[t];
    if (tables.mode[t] == kNone) {
      for (int64_t j = start; j < end; ++j, slot += dim) {
        const int64_t id = tables.id[t][j];
        if (tables.IsPadding(t, id)) {
          std::memset(slot, 0, sizeof(float) * dim);
        } else {
          std::memcpy(slot, tables.Row(t, j), sizeof(float) * dim);
        }
      }
      continue;
    }
    std::memset(slot, 0, sizeof(float) * dim);
    int64_t count = 0;
    for (int64_t j = start; j < end; ++j) {
      const int64_t id = tables.id[t][j];
      if (tables.IsPadding(t, id)) continue;
      AddRow(slot, tables.Row(t, j), dim);
      ++count;
    }
    if (tables.mode[t] == kMean && count > 1) {
      const float scale = 1.0f / static_cast<float>(count);
      for (int64_t d = 0; d < dim; ++d) slot[d] *= scale;
    }
  }
}

EDO_PREFETCH void PrefetchExample(const Tables& tables, int64_t b) {
  for (int64_t t = 0; t < tables.count; ++t) {
    if (tables.quantized[t] != nullptr) continue;  // the batch's own rows, just written
    for (int64_t j = tables.Start(t, b); j < tables.Start(t, b + 1); ++j) {
      const int64_t id = tables.id[t][j];
      if (id >= 0 && id < tables.rows[t]) Prefetch(tables.weight[t] + id * tables.dim[t], sizeof(float) * tables.dim[t]);
    }
  }
}

// The gradient each entry of bag b sends its row: the bag's, divided by its count for a mean.
float EntryFactor(const Tables& tables, int64_t t, int64_t b) {
  if (tables.mode[t] != kMean) return 1.0f;
  int64_t count = 0;
  for (int64_t j = tables.Start(t, b); j < tables.Start(t, b + 1); ++j) count += !tables.IsPadding(t, tables.id[t][j]);
  return count > 1 ? 1.0f / static_cast<float>(count) : 1.0f;
}

// Distinct ids in order of first use, found through an open-addressing hash table.
class DistinctIds {
 public:
  std::vector<int64_t> ids;

  // Room for up to n distinct ids; forgets the ones before.
  void Reset(int64_t n) {
    int bits = 1;
    while ((int64_t{1} << bits) < 2 * n) ++bits;
    mask_ = (uint64_t{1} << bits) - 1;
    shift_ = 64 - bits;
    slots_.assign(uint64_t{1} << bits, -1);
    ids.clear();
  }

  // The place of id among the distinct ids, appended when new.
  int64_t Insert(int64_t id) {
    uint64_t s = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> shift_;
    while (slots_[s] >= 0 && ids[slots_[s]] != id) s = (s + 1) & mask_;
    if (slots_[s] < 0) {
      slots_[s] = static_cast<int64_t>(ids.size());
      ids.push_back(id);
    }
    return slots_[s];
  }

 private:
  std::vector<int64_t> slots_;
  uint64_t mask_ = 0;
  int shift_ = 63;
};

// A QAT table's batch: its distinct rows fake-quantized once, and the one each entry reads.
struct QuantizedRows {
  DistinctIds distinct;
  std::vector<int64_t> index;
  std::vector<float> values;

  void Fill(const Tables& tables, int64_t t, int format, int iterations) {
    const int64_t n = tables.Start(t, tables.batch), dim = tables.dim[t];
    distinct.Reset(n);
    index.resize(n);
    for (int64_t j = 0; j < n; ++j) index[j] = tables.IsPadding(t, tables.id[t][j]) ? 0 : distinct.Insert(tables.id[t][j]);
    values.resize(distinct.ids.size() * dim);
    for (size_t u = 0; u < distinct.ids.size(); ++u) {
      edo::FakeQuantizeRow(tables.weight[t] + distinct.ids[u] * dim, dim, format, iterations, values.data() + u * dim);
    }
  }
};

// The distinct rows of one table's batch with each one's summed gradient, in order of first use.
struct RowGradients {
  DistinctIds distinct;
  std::vector<float> sums;

  void Gather(const Tables& tables, int64_t t, const float* grad) {
    const int64_t dim = tables.dim[t];
    distinct.Reset(tables.Start(t, tables.batch));
    sums.clear();
    for (int64_t b = 0; b < tables.batch; ++b) {
      const float factor = EntryFactor(tables, t, b);
      const float* bag_grad = grad + b * tables.width;
      for (int64_t j = tables.Start(t, b); j < tables.Start(t, b + 1); ++j) {
        const int64_t id = tables.id[t][j];
        if (tables.IsPadding(t, id)) continue;
        const int64_t u = distinct.Insert(id);
        if (static_cast<int64_t>(sums.size()) < (u + 1) * dim) sums.resize((u + 1) * dim, 0.0f);
        float* sum = sums.data() + u * dim;
        const float* g = bag_grad + tables.Column(t, b, j);
        if (factor == 1.0f) {
          AddRow(sum, g, dim);
        } else {
          for (int64_t d = 0; d < dim; ++d) sum[d] += g[d] * factor;
        }
      }
    }
  }
};

// The optimizer of one table: its rule, hyper-parameters and state (fp32, or 16 bits: optimizer_states.h).
struct TableRule {
  int rule;
  float learning_rate, epsilon, beta1, beta2, weight_decay;
  void* state1;  // Adagrad: [rows, dim]; row-wise Adagrad: [rows]; (row-wise) Adam: first moments [rows, dim]
  void* state2;  // Adam: second moments [rows, dim]; row-wise Adam: [rows]
  float* beta_pows;  // Adam: beta1^t, beta2^t
  int state_format;
  uint64_t salt;  // the table's place and step count, for 16-bit states' rounding: new random bits each step
  // row r of these states is row first_row + r * row_stride of the whole table (a rank's share: its rank and
  // the number of ranks), whose place keys the rounding, so that a share rounds as the whole table does
  int64_t first_row, row_stride;

  // Whether state 1 / 2 sums squares (kept as its square root in fp16, whose range the sums of small
  // gradients' squares fall below: their roots stay inside it).
  bool Squares1() const { return rule == kAdagrad || rule == kRowwiseAdagrad; }
  bool Squares2() const { return rule == kAdam || rule == kRowwiseAdam; }

  // Values of each state per row.
  int64_t Width1(int64_t dim) const {
    if (rule == kSgd || (rule == kRowwiseAdam && beta1 == 0.0f)) return 0;
    return rule == kRowwiseAdagrad ? 1 : dim;
  }
  int64_t Width2(int64_t dim) const { return rule == kAdam ? dim : rule == kRowwiseAdam ? 1 : 0; }
  int64_t RowBytes1(int64_t dim) const { return StateRowBytes(Width1(dim), state_format); }
  int64_t RowBytes2(int64_t dim) const { return StateRowBytes(Width2(dim), state_format); }

  // Asks for the row's weights and state ahead of their update.
  EDO_PREFETCH void Prefetch(const float* weight, int64_t row, int64_t dim) const {
    ::Prefetch(weight + row * dim, sizeof(float) * dim);
    const int64_t bytes1 = RowBytes1(dim), bytes2 = RowBytes2(dim);
    if (bytes1 > 0) ::Prefetch(static_cast<const char*>(state1) + row * bytes1, bytes1);
    if (bytes2 > 0) ::Prefetch(static_cast<const char*>(state2) + row * bytes2, bytes2);
  }

  // Updates row ``row`` (weights p) with its summed gradient g, to which the weight decay is added first (L2
  // on the batch's rows); ``scratch`` holds compressed states as fp32.
  void Update(float* p, float* g, int64_t row, int64_t dim, std::vector<float>* scratch) const {
    if (weight_decay != 0.0f) {
      for (int64_t d = 0; d < dim; ++d) g[d] += weight_decay * p[d];
    }
    const int64_t w1 = Width1(dim), w2 = Width2(dim);
    if (state_format == kStateFp32) {
      Apply(p, g, static_cast<float*>(state1) + row * w1, static_cast<float*>(state2) + row * w2, dim);
      return;
    }
    scratch->resize(w1 + w2);
    float* s1 = scratch->data();
    float* s2 = s1 + w1;
    // fp16 and 8-bit codes keep sums of squares as their roots; an 8-bit state's single value per row is fp32
    const bool roots = state_format == kStateFp16 || state_format == kStateInt8;
    const bool root1 = roots && Squares1() && !(state_format == kStateInt8 && w1 == 1);
    const bool root2 = roots && Squares2() && !(state_format == kStateInt8 && w2 == 1);
    Load(state1, row, w1, RowBytes1(dim), !Squares1(), s1);
    Load(state2, row, w2, RowBytes2(dim), !Squares2(), s2);
    if (root1) for (int64_t d = 0; d < w1; ++d) s1[d] *= s1[d];
    if (root2) for (int64_t d = 0; d < w2; ++d) s2[d] *= s2[d];
    Apply(p, g, s1, s2, dim);
    if (root1) for (int64_t d = 0; d < w1; ++d) s1[d] = std::sqrt(s1[d]);
    if (root2) for (int64_t d = 0; d < w2; ++d) s2[d] = std::sqrt(s2[d]);
    const uint64_t place = salt ^ static_cast<uint64_t>(first_row + row * row_stride) * 2 * (w1 + w2);
    Store(state1, row, w1, RowBytes1(dim), !Squares1(), s1, place);
    Store(state2, row, w2, RowBytes2(dim), !Squares2(), s2, place + 1);
  }

  // Row ``row``'s ``width`` state values as fp32 (of ``bytes`` a row; signed says which 8-bit code).
  void Load(const void* states, int64_t row, int64_t width, int64_t bytes, bool is_signed, float* out) const {
    if (state_format == kStateInt8) {
      if (width > 0) LoadInt8Row(static_cast<const int8_t*>(states) + row * bytes, width, is_signed, out);
      return;
    }
    for (int64_t d = 0; d < width; ++d) out[d] = LoadState(states, row * width + d, state_format);
  }

  // Writes them back; value d draws its random bits from place + 2 d (the two states: place, place + 1).
  void Store(void* states, int64_t row, int64_t width, int64_t bytes, bool is_signed, const float* values,
             uint64_t place) const {
    if (state_format == kStateInt8) {
      if (width > 0) StoreInt8Row(static_cast<int8_t*>(states) + row * bytes, values, width, is_signed, place);
      return;
    }
    for (int64_t d = 0; d < width; ++d) StoreState(states, row * width + d, values[d], state_format, place + 2 * d);
  }

  // The rule on one row: weights p, gradient g, the row's states m1 and m2 (a per-row state: one value).
  void Apply(float* p, const float* g, float* m1, float* m2, int64_t dim) const {
    if (rule == kSgd) {
      if (dim % 8 == 0) {  // Paddle's generated AVX code: a product, then a difference
        for (int64_t d = 0; d < dim; ++d) p[d] = p[d] - learning_rate * g[d];
      } else {  // its C++ reference, compiled with multiply-adds
        for (int64_t d = 0; d < dim; ++d) p[d] = std::fma(-learning_rate, g[d], p[d]);
      }
    } else if (rule == kAdagrad) {
      for (int64_t d = 0; d < dim; ++d) {
        m1[d] = m1[d] + g[d] * g[d];
        p[d] = p[d] - learning_rate * g[d] / (std::sqrt(m1[d]) + epsilon);
      }
    } else if (rule == kRowwiseAdagrad) {
      float squares = 0.0f;
      for (int64_t d = 0; d < dim; ++d) squares += g[d] * g[d];
      m1[0] = m1[0] + squares / static_cast<float>(dim);
      const float denominator = std::sqrt(m1[0]) + epsilon;
      for (int64_t d = 0; d < dim; ++d) p[d] = p[d] - learning_rate * g[d] / denominator;
    } else if (rule == kRowwiseAdam) {
      float squares = 0.0f;
      for (int64_t d = 0; d < dim; ++d) squares += g[d] * g[d];
      m2[0] = beta2 * m2[0] + (1 - beta2) * (squares / static_cast<float>(dim));
      const float beta1_pow = beta_pows[0], beta2_pow = beta_pows[1];
      const float lr = learning_rate * (std::sqrt(1 - beta2_pow) / (1 - beta1_pow));
      const float denominator = std::sqrt(m2[0]) + epsilon * std::sqrt(1 - beta2_pow);
      if (beta1 == 0.0f) {
        for (int64_t d = 0; d < dim; ++d) p[d] = p[d] - lr * (g[d] / denominator);
      } else {
        for (int64_t d = 0; d < dim; ++d) {
          m1[d] = beta1 * m1[d] + (1 - beta1) * g[d];
          p[d] = p[d] - lr * (m1[d] / denominator);
        }
      }
    } else {
      const float beta1_pow = beta_pows[0], beta2_pow = beta_pows[1];
      const float lr = learning_rate * (std::sqrt(1 - beta2_pow) / (1 - beta1_pow));
      const float eps = epsilon * std::sqrt(1 - beta2_pow);
      for (int64_t d = 0; d < dim; ++d) {
        m1[d] = beta1 * m1[d] + (1 - beta1) * g[d];
        m2[d] = beta2 * m2[d] + (1 - beta2) * g[d] * g[d];
        p[d] = p[d] - lr * (m1[d] / (std::sqrt(m2[d]) + eps));
      }
    }
  }
};

// Table t's rule and hyper-parameters over its two state tensors (checked against the rule, its state format
// and the table's [rows, dim]); pows: its beta1^t and beta2^t; step: its step count, for the states' rounding;
// state row r is row first_row + r * row_stride of the whole table.
TableRule RuleOf(int64_t t, int rule, float learning_rate, float epsilon, float beta1, float beta2,
                 float weight_decay, int format, const paddle::Tensor& state1, const paddle::Tensor& state2,
                 int64_t rows, int64_t dim, float* pows, int64_t step, int64_t first_row, int64_t row_stride) {
  PD_CHECK(rule >= kSgd && rule <= kRowwiseAdam, "table ", t, ": rule ", rule, " is unknown");
  PD_CHECK(format >= kStateFp32 && format <= kStateInt8, "table ", t, ": state format ", format, " is unknown");
  PD_CHECK(first_row >= 0 && row_stride >= 1 && first_row < row_stride, "table ", t, ": rows map to the whole table's ",
           "first_row + row * row_stride with 0 <= first_row < row_stride, not ", first_row, " and ", row_stride);
  TableRule table_rule = {rule, learning_rate, epsilon, beta1, beta2, weight_decay, nullptr, nullptr, pows, format,
                          MixBits((static_cast<uint64_t>(t) << 40) + static_cast<uint64_t>(step)), first_row,
                          row_stride};
  const int64_t item = format == kStateFp32 ? 4 : format == kStateInt8 ? 1 : 2;
  const int64_t want1 = rows * table_rule.RowBytes1(dim) / item, want2 = rows * table_rule.RowBytes2(dim) / item;
  const paddle::DataType stored = format == kStateFp32 ? paddle::DataType::FLOAT32 :
                                  format == kStateInt8 ? paddle::DataType::INT8 : paddle::DataType::INT16;
  PD_CHECK(state1.dtype() == stored && state2.dtype() == stored, "table ", t, ": optimizer states must be ",
           format == kStateFp32 ? "float32" : format == kStateInt8 ? "int8 (8-bit records)" : "int16 (16-bit floats' bits)");
  PD_CHECK(want1 == 0 || state1.numel() == want1, "table ", t, ": state 1 holds ", state1.numel(),
           " values, the rule needs ", want1);
  PD_CHECK(want2 == 0 || state2.numel() == want2, "table ", t, ": state 2 holds ", state2.numel(),
           " values, the rule needs ", want2);
  table_rule.state1 = const_cast<void*>(state1.data());
  table_rule.state2 = const_cast<void*>(state2.data());
  return table_rule;
}

}  // namespace

std::vector<paddle::Tensor> CollectionLookup(const std::vector<paddle::Tensor>& weights,
                                             const std::vector<paddle::Tensor>& ids,
                                             const std::vector<paddle::Tensor>& bounds,
                                             const std::vector<int64_t>& lengths, const std::vector<int>& modes,
                                             const std::vector<int64_t>& paddings, int64_t batch,
                                             const std::vector<int>& fake_formats,
                                             const std::vector<int>& range_iterations) {
  Tables tables = Describe(weights, ids, bounds, lengths, modes, paddings, batch);
  PD_CHECK(static_cast<int64_t>(fake_formats.size()) == tables.count &&
               static_cast<int64_t>(range_iterations.size()) == tables.count,
           "one fake format and range iteration count per table");
  const std::string bad = FirstBadId(tables, ids);
  PD_CHECK(bad.empty(), bad);
  std::vector<int64_t> quantized_tables;
  for (int64_t t = 0; t < tables.count; ++t) {
    PD_CHECK(fake_formats[t] >= -1 && fake_formats[t] <= edo::kFakeBinary, "table ", t, ": fake format ",
             fake_formats[t], " is unknown");
    if (fake_formats[t] >= 0) quantized_tables.push_back(t);
    edo::PlaceTableOnHugePages(tables.weight[t], sizeof(float) * tables.rows[t] * tables.dim[t]);
  }
  std::vector<QuantizedRows> quantized(quantized_tables.size());
  std::atomic<int64_t> next_table{0};  // handed out as the backward's tables are
#pragma omp parallel if (quantized_tables.size() > 1 && tables.entries > kParallelEntries)
  for (int64_t q = next_table++; q < static_cast<int64_t>(quantized_tables.size()); q = next_table++) {
    const int64_t t = quantized_tables[q];
    quantized[q].Fill(tables, t, fake_formats[t], range_iterations[t]);
  }
  for (size_t q = 0; q < quantized_tables.size(); ++q) {
    tables.quantized[quantized_tables[q]] = quantized[q].values.data();
    tables.quantized_index[quantized_tables[q]] = quantized[q].index.data();
  }
  paddle::Tensor out = paddle::empty({batch, tables.width}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (tables.entries > kParallelEntries)
  for (int64_t b = 0; b < batch; ++b) {
    if (b + kPrefetchAhead < batch) PrefetchExample(tables, b + kPrefetchAhead);
    LookUpExample(tables, b, o + b * tables.width);
  }
  return {out};
}

// Applies each table's optimizer to its batch's rows, given the output's gradient; returns the number of
// distinct rows updated per table.
std::vector<paddle::Tensor> CollectionUpdate(const std::vector<paddle::Tensor>& weights,
                                             const std::vector<paddle::Tensor>& states1,
                                             const std::vector<paddle::Tensor>& states2,
                                             const std::vector<paddle::Tensor>& ids,
                                             const std::vector<paddle::Tensor>& bounds, const paddle::Tensor& grad,
                                             const paddle::Tensor& beta_pows, const paddle::Tensor& steps,
                                             const std::vector<int64_t>& lengths,
                                             const std::vector<int>& modes, const std::vector<int64_t>& paddings,
                                             int64_t batch, const std::vector<int>& rules,
                                             const std::vector<float>& learning_rates,
                                             const std::vector<float>& epsilons, const std::vector<float>& beta1s,
                                             const std::vector<float>& beta2s,
                                             const std::vector<float>& weight_decays,
                                             const std::vector<int>& state_formats,
                                             const std::vector<int64_t>& first_rows,
                                             const std::vector<int64_t>& row_strides) {
  const Tables tables = Describe(weights, ids, bounds, lengths, modes, paddings, batch);
  const int64_t count = tables.count;
  PD_CHECK(static_cast<int64_t>(rules.size()) == count && static_cast<int64_t>(learning_rates.size()) == count &&
               static_cast<int64_t>(epsilons.size()) == count && static_cast<int64_t>(beta1s.size()) == count &&
               static_cast<int64_t>(beta2s.size()) == count && static_cast<int64_t>(weight_decays.size()) == count &&
               static_cast<int64_t>(state_formats.size()) == count && static_cast<int64_t>(states1.size()) == count &&
               static_cast<int64_t>(states2.size()) == count && static_cast<int64_t>(first_rows.size()) == count &&
               static_cast<int64_t>(row_strides.size()) == count,
           "one rule, learning rate, epsilon, beta1, beta2, weight decay, state format, two states, first row and "
           "row stride per table");
  PD_CHECK(grad.is_cpu() && grad.dtype() == paddle::DataType::FLOAT32 && grad.numel() == batch * tables.width,
           "the output gradient must be float32 [", batch, ", ", tables.width, "]");
  PD_CHECK(beta_pows.dtype() == paddle::DataType::FLOAT32 && beta_pows.numel() == 2 * count,
           "beta_pows must be float32 [tables, 2]");
  float* pows = const_cast<float*>(beta_pows.data<float>());
  PD_CHECK(steps.dtype() == paddle::DataType::INT64 && steps.numel() == count, "steps must be int64 [tables]");
  int64_t* step_counts = const_cast<int64_t*>(steps.data<int64_t>());
  std::vector<TableRule> table_rules(count);
  for (int64_t t = 0; t < count; ++t) {
    table_rules[t] = RuleOf(t, rules[t], learning_rates[t], epsilons[t], beta1s[t], beta2s[t], weight_decays[t],
                            state_formats[t], states1[t], states2[t], tables.rows[t], tables.dim[t], pows + 2 * t,
                            step_counts[t], first_rows[t], row_strides[t]);
  }
  const std::string bad = FirstBadId(tables, ids);
  PD_CHECK(bad.empty(), bad);
  paddle::Tensor touched = paddle::empty({count}, paddle::DataType::INT64, paddle::CPUPlace());
  int64_t* distinct_rows = touched.data<int64_t>();
  const float* g = grad.data<float>();
  // Tables handed out one at a time from a shared counter: `omp for schedule(dynamic)` calls GNU's loop
  // entry points, which Paddle's OpenMP runtime does not serve (GNU's then runs every table in every thread).
  std::atomic<int64_t> next_table{0};
#pragma omp parallel if (tables.entries > kParallelEntries)
  {
    RowGradients rows;  // each thread's scratch, reused from table to table
    std::vector<float> states;
    for (int64_t t = next_table++; t < count; t = next_table++) {
      rows.Gather(tables, t, g);
      const int64_t dim = tables.dim[t], n = static_cast<int64_t>(rows.distinct.ids.size());
      const bool stepped = tables.Start(t, batch) > 0;  // a table without entries takes no step
      if (rules[t] == kAdam && stepped) AdvanceStepCounts(pows + 2 * t, beta1s[t], beta2s[t]);  // as Paddle's: first
      for (int64_t u = 0; u < n; ++u) {
        if (u + kPrefetchAhead < n) table_rules[t].Prefetch(tables.weight[t], rows.distinct.ids[u + kPrefetchAhead], dim);
        const int64_t row = rows.distinct.ids[u];
        float* weight = tables.weight[t] + row * dim;
        table_rules[t].Update(weight, rows.sums.data() + u * dim, row, dim, &states);
      }
      if (rules[t] == kRowwiseAdam && stepped) AdvanceStepCounts(pows + 2 * t, beta1s[t], beta2s[t]);
      if (stepped) ++step_counts[t];
      distinct_rows[t] = n;
    }
  }
  return {touched};
}

// Applies one table's rule to rows decoded out of it (a low_precision table's, which holds no fp32 rows):
// rows[u] (float32 [n, dim], updated in place) is table row ids[u] (increasing), grad[u] its summed gradient;
// the states are the table's [table_rows, ...], indexed by ids, and the step counts advance as a
// collection's do. The padding row (negative: none) is left alone. Row r is row first_row + r * row_stride of
// the whole table (a share's), for the states' rounding. Returns the number of rows updated.
std::vector<paddle::Tensor> RowsUpdate(const paddle::Tensor& rows, const paddle::Tensor& grad, const paddle::Tensor& ids,
                                       const paddle::Tensor& state1, const paddle::Tensor& state2,
                                       const paddle::Tensor& beta_pows, const paddle::Tensor& steps,
                                       int64_t table_rows, int64_t padding, int rule, float learning_rate,
                                       float epsilon, float beta1, float beta2, float weight_decay, int state_format,
                                       int64_t first_row, int64_t row_stride) {
  PD_CHECK(rows.is_cpu() && rows.dtype() == paddle::DataType::FLOAT32 && rows.shape().size() == 2,
           "rows must be float32 [n, dim] on the CPU");
  const int64_t n = rows.shape()[0], dim = rows.shape()[1];
  PD_CHECK(grad.is_cpu() && grad.dtype() == paddle::DataType::FLOAT32 && grad.numel() == n * dim,
           "the rows' gradient must be float32 [", n, ", ", dim, "]");
  PD_CHECK(ids.is_cpu() && ids.dtype() == paddle::DataType::INT64 && ids.numel() == n, "ids must be int64 [", n, "]");
  PD_CHECK(beta_pows.dtype() == paddle::DataType::FLOAT32 && beta_pows.numel() == 2, "beta_pows must be float32 [1, 2]");
  PD_CHECK(steps.dtype() == paddle::DataType::INT64 && steps.numel() == 1, "steps must be int64 [1]");
  const int64_t* id = ids.data<int64_t>();
  for (int64_t u = 0; u < n; ++u) {  // distinct, so that threads update rows (and states) of their own
    PD_CHECK(id[u] >= 0 && id[u] < table_rows, "row ", id[u], " is outside [0, ", table_rows, ")");
    PD_CHECK(u == 0 || id[u] > id[u - 1], "rows must be distinct and increasing (", id[u - 1], " then ", id[u], ")");
  }
  float* pows = const_cast<float*>(beta_pows.data<float>());
  int64_t* step = const_cast<int64_t*>(steps.data<int64_t>());
  const TableRule table_rule = RuleOf(0, rule, learning_rate, epsilon, beta1, beta2, weight_decay, state_format, state1,
                                      state2, table_rows, dim, pows, *step, first_row, row_stride);
  float* values = const_cast<float*>(rows.data<float>());
  const float* g = grad.data<float>();
  if (rule == kAdam && n > 0) AdvanceStepCounts(pows, beta1, beta2);
  int64_t updated = n;
  for (int64_t u = 0; u < n; ++u) updated -= id[u] == padding;
  // the rows are distinct, and so are their states: each thread updates its own (the same bits in any order)
#pragma omp parallel if (n * dim > kParallelEntries)
  {
    std::vector<float> sum(dim), scratch;
#pragma omp for schedule(static)
    for (int64_t u = 0; u < n; ++u) {
      if (id[u] == padding) continue;
      std::copy(g + u * dim, g + (u + 1) * dim, sum.begin());
      table_rule.Update(values + u * dim, sum.data(), id[u], dim, &scratch);
    }
  }
  if (rule == kRowwiseAdam && n > 0) AdvanceStepCounts(pows, beta1, beta2);
  if (n > 0) ++*step;
  paddle::Tensor count = paddle::empty({1}, paddle::DataType::INT64, paddle::CPUPlace());
  *count.data<int64_t>() = updated;
  return {count};
}

std::vector<std::vector<int64_t>> CollectionLookupShape(const std::vector<std::vector<int64_t>>& weights,
                                                        const std::vector<std::vector<int64_t>>& ids,
                                                        const std::vector<std::vector<int64_t>>& bounds,
                                                        const std::vector<int64_t>& lengths,
                                                        const std::vector<int>& modes,
                                                        const std::vector<int64_t>& paddings, int64_t batch,
                                                        const std::vector<int>& fake_formats,
                                                        const std::vector<int>& range_iterations) {
  int64_t width = 0;
  for (size_t t = 0; t < weights.size(); ++t) width += modes[t] == kNone ? lengths[t] * weights[t][1] : weights[t][1];
  return {{batch, width}};
}

std::vector<paddle::DataType> CollectionLookupDtype(const std::vector<paddle::DataType>&,
                                                    const std::vector<paddle::DataType>&,
                                                    const std::vector<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(edo_collection_lookup)
    .Inputs({paddle::Vec("Weights"), paddle::Vec("Ids"), paddle::Vec("Bounds")})
    .Outputs({"Out"})
    .Attrs({"lengths: std::vector<int64_t>", "modes: std::vector<int>", "paddings: std::vector<int64_t>",
            "batch: int64_t", "fake_formats: std::vector<int>", "range_iterations: std::vector<int>"})
    .SetKernelFn(PD_KERNEL(CollectionLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(CollectionLookupShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(CollectionLookupDtype));

PD_BUILD_OP(edo_collection_update)
    .Inputs({paddle::Vec("Weights"), paddle::Vec("States1"), paddle::Vec("States2"), paddle::Vec("Ids"),
             paddle::Vec("Bounds"), "Grad", "BetaPows", "Steps"})
    .Outputs({"Touched"})
    .Attrs({"lengths: std::vector<int64_t>", "modes: std::vector<int>", "paddings: std::vector<int64_t>",
            "batch: int64_t", "rules: std::vector<int>", "learning_rates: std::vector<float>",
            "epsilons: std::vector<float>", "beta1s: std::vector<float>", "beta2s: std::vector<float>",
            "weight_decays: std::vector<float>", "state_formats: std::vector<int>",
            "first_rows: std::vector<int64_t>", "row_strides: std::vector<int64_t>"})
    .SetKernelFn(PD_KERNEL(CollectionUpdate));

PD_BUILD_OP(edo_rows_update)
    .Inputs({"Rows", "Grad", "Ids", "State1", "State2", "BetaPows", "Steps"})
    .Outputs({"Updated"})
    .Attrs({"table_rows: int64_t", "padding: int64_t", "rule: int", "learning_rate: float", "epsilon: float",
            "beta1: float", "beta2: float", "weight_decay: float", "state_format: int", "first_row: int64_t",
            "row_stride: int64_t"})
    .SetKernelFn(PD_KERNEL(RowsUpdate));
