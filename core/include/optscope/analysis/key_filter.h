// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The key filter of the GUI's State keys and Diff views: whitespace-separated terms that must all hold.
//   word              the key contains it (case-insensitive); * ? [abc] are wildcards inside it ("mlp.2*max")
//   /regex/, re:regex an ECMAScript regular expression found in the key (case-insensitive)
//   key:word          the key contains the word even when it reads as a predicate ("key:inf")
//   dtype:NAME        the tensor's element type: PyTorch's names and aliases (bfloat16, float, half) and bf16, fp16,
//                     fp32, fp64, f16, f32, f64
//   nan, inf          tensors holding a NaN / an infinity          } need the values: scanValueFacts reads them
//   |x|>V, |x|>=V, |x|<V, |x|<=V   the largest finite |x| compared with V
//   -term, !term      the term does not hold
// An empty filter keeps everything.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <string>
#include <vector>

namespace optscope {

/// What the value predicates need of one entry; known = false where it was not (or could not be) read.
struct ValueFacts
{
    bool known = false;
    bool hasNan = false;
    bool hasInf = false;
    double maxAbs = 0.0; ///< largest |x| over the finite elements (0 when there are none)
};

class KeyFilter
{
public:
    enum class TermKind : unsigned char { Contains, Glob, Regex, DType, Nan, Inf, AbsCompare };
    enum class Compare : unsigned char { Greater, GreaterEqual, Less, LessEqual };

    KeyFilter() = default;
    /// parses @p text; a term it cannot read (a bad regex, an unknown dtype, "|x|>abc") makes error() non-empty and
    /// the filter match nothing
    static KeyFilter parse(const std::string& text);

    bool empty() const { return m_terms.empty() && m_error.empty(); }
    const std::string& error() const { return m_error; }
    /// whether a term asks about values (nan, inf, |x|): matches() needs ValueFacts for those
    bool needsValues() const;
    /// does @p entry (under @p key, its display key) pass? @p facts may be null: value terms then do not hold
    bool matches(const std::string& key, const Entry* entry, const ValueFacts* facts) const;
    /// only the key terms (words, globs, regexes): for rows that are not entries of one checkpoint (a diff's keys)
    bool matchesKey(const std::string& key) const;

private:
    struct Term;
    std::vector<std::shared_ptr<const Term>> m_terms;
    std::string m_error;
};

/// Reads every tensor of @p checkpoint (streamed, one at a time) for the value predicates: per entry, in order.
/// Values that are numbers (a float step) count too. An unreadable tensor stays unknown. Cancellable.
std::vector<ValueFacts> scanValueFacts(const Checkpoint& checkpoint, const Progress& progress = {});

} // namespace optscope
