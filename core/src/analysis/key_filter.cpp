// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/key_filter.h"
#include "optscope/base/error.h"
#include "optscope/base/pattern.h"
#include "optscope/tensor/tensor_stats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

namespace optscope {

struct KeyFilter::Term
{
    TermKind kind = TermKind::Contains;
    bool negated = false;
    std::string text; ///< Contains/Glob: lower-cased pattern
    std::optional<Pattern> regex; ///< Regex: the expression, case-insensitive
    DType dtype = DType::Unknown;
    Compare compare = Compare::Greater;
    double bound = 0.0;
};

namespace {

std::string lower(std::string s)
{
    for (auto& c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

/// case-insensitive glob match of all of @p key from @p k against @p pattern from @p p; iterative with one star
/// backtrack point, so linear-ish and never exponential
bool globMatch(const std::string& pattern, const std::string& key)
{
    size_t p = 0, k = 0, starP = std::string::npos, starK = 0;
    auto fold = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
    auto classMatch = [&](size_t& pp, char c) { // pattern[pp] == '['; advances pp past ']'; false if malformed
        size_t q = pp + 1;
        bool negate = q < pattern.size() && (pattern[q] == '!' || pattern[q] == '^');
        if (negate) ++q;
        bool found = false;
        const size_t start = q;
        while (q < pattern.size() && (pattern[q] != ']' || q == start)) {
            if (q + 2 < pattern.size() && pattern[q + 1] == '-' && pattern[q + 2] != ']') {
                found = found || (fold(c) >= fold(pattern[q]) && fold(c) <= fold(pattern[q + 2]));
                q += 3;
            } else {
                found = found || fold(c) == fold(pattern[q]);
                ++q;
            }
        }
        if (q >= pattern.size()) return std::make_pair(false, false); // no closing ]: a literal '['
        pp = q + 1;
        return std::make_pair(true, found != negate);
    };
    while (k < key.size()) {
        if (p < pattern.size() && pattern[p] == '*') {
            starP = p++;
            starK = k;
            continue;
        }
        if (p < pattern.size()) {
            if (pattern[p] == '?') {
                ++p;
                ++k;
                continue;
            }
            if (pattern[p] == '[') {
                size_t pp = p;
                const auto [wellFormed, ok] = classMatch(pp, key[k]);
                if (wellFormed && ok) {
                    p = pp;
                    ++k;
                    continue;
                }
                if (!wellFormed && fold(key[k]) == '[') {
                    ++p;
                    ++k;
                    continue;
                }
            } else if (fold(pattern[p]) == fold(key[k])) {
                ++p;
                ++k;
                continue;
            }
        }
        if (starP == std::string::npos) return false;
        p = starP + 1;
        k = ++starK;
    }
    while (p < pattern.size() && pattern[p] == '*')
        ++p;
    return p == pattern.size();
}

std::optional<DType> dtypeFromShortName(std::string name)
{
    name = lower(std::move(name));
    static const std::pair<const char*, DType> kShort[] = {{"bf16", DType::BFloat16}, {"fp16", DType::Float16},
        {"f16", DType::Float16}, {"fp32", DType::Float32}, {"f32", DType::Float32}, {"fp64", DType::Float64},
        {"f64", DType::Float64}, {"i64", DType::Int64}, {"i32", DType::Int32}, {"u8", DType::UInt8}};
    for (const auto& [alias, dtype] : kShort)
        if (name == alias) return dtype;
    return dtypeFromName(name);
}

} // namespace

KeyFilter KeyFilter::parse(const std::string& text)
{
    KeyFilter f;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
            ++i;
        if (i >= text.size()) break;
        size_t end = i;
        const size_t slash = (text[i] == '-' || text[i] == '!') && i + 1 < text.size() ? i + 1 : i;
        if (text[slash] == '/') {
            // /regex/ may hold spaces: up to the next '/' that is not escaped
            size_t close = slash + 1;
            while (close < text.size() && (text[close] != '/' || text[close - 1] == '\\'))
                ++close;
            end = close < text.size() ? close + 1 : text.size();
        } else {
            while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])))
                ++end;
        }
        std::string word = text.substr(i, end - i);
        i = end;
        auto term = std::make_shared<Term>();
        if (word.size() > 1 && (word[0] == '-' || word[0] == '!')) {
            term->negated = true;
            word.erase(0, 1);
        }
        const std::string lw = lower(word);
        auto fail = [&](const std::string& what) {
            if (f.m_error.empty()) f.m_error = what;
        };
        if ((word.size() >= 2 && word.front() == '/' && word.back() == '/') || lw.rfind("re:", 0) == 0) {
            const std::string pattern = word.front() == '/' ? word.substr(1, word.size() - 2) : word.substr(3);
            try {
                term->regex.emplace(pattern, true);
                term->kind = TermKind::Regex;
            } catch (const BadPattern& e) {
                fail("'" + word + "' is not a regular expression: " + e.what());
                continue;
            }
        } else if (lw.rfind("dtype:", 0) == 0) {
            const auto dt = dtypeFromShortName(word.substr(6));
            if (!dt) {
                fail("'" + word.substr(6) + "' is not a dtype (bf16, float32, int64, ...)");
                continue;
            }
            term->kind = TermKind::DType;
            term->dtype = *dt;
        } else if (lw == "nan") {
            term->kind = TermKind::Nan;
        } else if (lw == "inf") {
            term->kind = TermKind::Inf;
        } else if (lw.rfind("|x|", 0) == 0) {
            std::string rest = lw.substr(3);
            if (rest.rfind(">=", 0) == 0) {
                term->compare = Compare::GreaterEqual;
                rest.erase(0, 2);
            } else if (rest.rfind("<=", 0) == 0) {
                term->compare = Compare::LessEqual;
                rest.erase(0, 2);
            } else if (!rest.empty() && rest[0] == '>') {
                term->compare = Compare::Greater;
                rest.erase(0, 1);
            } else if (!rest.empty() && rest[0] == '<') {
                term->compare = Compare::Less;
                rest.erase(0, 1);
            } else {
                fail("'" + word + "': write |x|>V, |x|>=V, |x|<V or |x|<=V");
                continue;
            }
            char* stop = nullptr;
            term->bound = std::strtod(rest.c_str(), &stop);
            if (rest.empty() || *stop != '\0' || std::isnan(term->bound)) {
                fail("'" + word + "': '" + rest + "' is not a number");
                continue;
            }
            term->kind = TermKind::AbsCompare;
        } else {
            std::string pattern = lw.rfind("key:", 0) == 0 ? lw.substr(4) : lw;
            if (pattern.empty()) continue;
            const bool wild = pattern.find_first_of("*?[") != std::string::npos;
            term->kind = wild ? TermKind::Glob : TermKind::Contains;
            // a wildcard term is found anywhere in the key, as a word is
            term->text = wild ? "*" + pattern + "*" : pattern;
        }
        f.m_terms.push_back(std::move(term));
    }
    return f;
}

bool KeyFilter::needsValues() const
{
    return std::any_of(m_terms.begin(), m_terms.end(), [](const auto& t) {
        return t->kind == TermKind::Nan || t->kind == TermKind::Inf || t->kind == TermKind::AbsCompare;
    });
}

bool KeyFilter::matchesKey(const std::string& key) const
{
    return matches(key, nullptr, nullptr);
}

bool KeyFilter::matches(const std::string& key, const Entry* entry, const ValueFacts* facts) const
{
    if (!m_error.empty()) return false;
    std::string folded; // made on first use
    for (const auto& t : m_terms) {
        bool holds = true;
        switch (t->kind) {
        case TermKind::Contains:
            if (folded.empty()) folded = lower(key);
            holds = folded.find(t->text) != std::string::npos;
            break;
        case TermKind::Glob:
            holds = globMatch(t->text, key);
            break;
        case TermKind::Regex:
            holds = t->regex->search(key);
            break;
        case TermKind::DType:
            if (!entry) continue; // not an entry of a checkpoint: only key terms apply
            holds = entry->isTensor() && entry->tensor->dtype == t->dtype;
            break;
        case TermKind::Nan:
        case TermKind::Inf:
        case TermKind::AbsCompare:
            if (!entry) continue;
            if (!facts || !facts->known) {
                holds = false;
            } else if (t->kind == TermKind::Nan) {
                holds = facts->hasNan;
            } else if (t->kind == TermKind::Inf) {
                holds = facts->hasInf;
            } else {
                const double m = facts->maxAbs;
                holds = t->compare == Compare::Greater    ? m > t->bound
                    : t->compare == Compare::GreaterEqual ? m >= t->bound
                    : t->compare == Compare::Less         ? m < t->bound
                                                          : m <= t->bound;
            }
            break;
        }
        if (holds == t->negated) return false;
    }
    return true;
}

std::vector<ValueFacts> scanValueFacts(const Checkpoint& checkpoint, const Progress& progress)
{
    std::vector<ValueFacts> facts(checkpoint.entries.size());
    uint64_t total = 0, done = 0;
    for (const auto& e : checkpoint.entries)
        if (e.isTensor()) total += e.tensor->nbytes();
    for (size_t i = 0; i < checkpoint.entries.size(); ++i) {
        progress.checkCancelled();
        const Entry& e = checkpoint.entries[i];
        ValueFacts& f = facts[i];
        if (!e.isTensor()) {
            const PyValue* v = e.value;
            if (v && (v->kind == PyKind::Float || v->kind == PyKind::Int)) { // numbers; flags (bool) are not
                const double x = v->kind == PyKind::Float ? v->real : static_cast<double>(v->integer);
                f.known = true;
                f.hasNan = std::isnan(x);
                f.hasInf = std::isinf(x);
                f.maxAbs = std::isfinite(x) ? std::fabs(x) : 0.0;
            }
            continue;
        }
        try {
            Progress cancelOnly; // the per-tensor fractions would fight the overall one
            cancelOnly.cancelled = progress.cancelled;
            const TensorStats s = computeTensorStats(checkpoint, e, 0, cancelOnly);
            f.known = true;
            f.hasNan = s.nanCount > 0;
            f.hasInf = s.infCount > 0;
            f.maxAbs = s.finite > 0 ? std::max(std::fabs(s.min), std::fabs(s.max)) : 0.0;
        } catch (const Error& err) {
            if (err.kind() == ErrorKind::Cancelled) throw;
            // unreadable: stays unknown, so no value predicate holds for it
        }
        done += e.tensor->nbytes();
        progress(total ? static_cast<double>(done) / static_cast<double>(total) : 1.0, "reading values");
    }
    return facts;
}

} // namespace optscope
