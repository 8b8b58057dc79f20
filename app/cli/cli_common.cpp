// SPDX-License-Identifier: GPL-3.0-or-later
#include "cli_common.h"

#include "optscope/io/job.h"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <streambuf>

#include "optscope/base/display_text.h"

namespace optscope::cli {

namespace {

/// Writes what passes through it to @p target line by line, each through displayText: no byte of a key, value or
/// message from a checkpoint reaches the terminal as a control or bidi character (an ESC sequence, a CR, a forged
/// line is shown as \x1b, \x0d, \u202e). Newlines pass: the commands' own line structure.
class EscapingBuffer : public std::streambuf
{
public:
    explicit EscapingBuffer(std::streambuf* target)
        : m_target(target)
    { }

protected:
    int_type overflow(int_type ch) override
    {
        if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
        m_line.push_back(traits_type::to_char_type(ch));
        if (ch == '\n') flushLine();
        return ch;
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override
    {
        for (std::streamsize i = 0; i < n;) {
            const void* nl = std::memchr(s + i, '\n', static_cast<size_t>(n - i));
            const std::streamsize end = nl ? static_cast<const char*>(nl) - s + 1 : n;
            m_line.append(s + i, static_cast<size_t>(end - i));
            if (nl) flushLine();
            i = end;
        }
        return n;
    }
    int sync() override
    {
        flushLine();
        return m_target->pubsync();
    }

private:
    void flushLine()
    {
        if (m_line.empty()) return;
        if (!needsDisplayEscape(m_line, true)) { // most lines: as they are, no copy
            m_target->sputn(m_line.data(), static_cast<std::streamsize>(m_line.size()));
        } else {
            const std::string out = displayText(m_line, true);
            m_target->sputn(out.data(), static_cast<std::streamsize>(out.size()));
        }
        m_line.clear();
    }
    std::streambuf* m_target;
    std::string m_line;
};

} // namespace

void escapeStandardStreams()
{
    // never destroyed: the streams flush through them at exit, after function-local statics are gone
    std::cout.rdbuf(new EscapingBuffer(std::cout.rdbuf()));
    std::cerr.rdbuf(new EscapingBuffer(std::cerr.rdbuf()));
}

Args::Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs)
    : m_specs(specs)
{
    bool onlyPositional = false;
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (onlyPositional || a.size() < 2 || a[0] != '-') {
            m_positional.push_back(a);
            continue;
        }
        if (a == "--") {
            onlyPositional = true;
            continue;
        }
        std::string name = a;
        std::optional<std::string> inlineValue;
        if (const auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
            name = a.substr(0, eq);
            inlineValue = a.substr(eq + 1);
        }
        const OptionSpec* spec = nullptr;
        for (const auto& s : specs)
            if (s.name == name || (!s.shortName.empty() && s.shortName == name)) spec = &s;
        if (!spec) throw UsageError("unknown option '" + name + "'");
        if (spec->takesValue) {
            if (!inlineValue) {
                if (i + 1 >= argv.size()) throw UsageError("option '" + name + "' needs a value");
                inlineValue = argv[++i];
            }
            m_values.emplace(spec->name, *inlineValue);
        } else {
            if (inlineValue) throw UsageError("option '" + name + "' takes no value");
            m_values.emplace(spec->name, "");
        }
    }
}

std::string Args::help(const std::string& command) const
{
    std::string text = commandUsage(command);
    const auto named = [&](const std::string& option) {
        for (size_t at = text.find(option); at != std::string::npos; at = text.find(option, at + 1)) {
            const size_t end = at + option.size(); // "--world-size" is not named by "--world-size-of"
            if (end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-'))
                return true;
        }
        return false;
    };
    std::string more;
    for (const auto& s : m_specs) {
        if (s.name == "--help" || named(s.name) || (!s.shortName.empty() && named(s.shortName))) continue;
        std::string left = "  " + (s.shortName.empty() ? "" : s.shortName + ", ") + s.name + (s.takesValue ? " X" : "");
        left.resize(std::max<size_t>(left.size() + 2, 24), ' ');
        more += left + s.help + "\n";
    }
    return more.empty() ? text : text + "Also:\n" + more;
}

std::optional<std::string> Args::value(const std::string& name) const
{
    auto it = m_values.find(name);
    if (it == m_values.end()) return std::nullopt;
    return it->second;
}

std::vector<std::string> Args::values(const std::string& name) const
{
    std::vector<std::string> out;
    auto range = m_values.equal_range(name);
    for (auto it = range.first; it != range.second; ++it)
        out.push_back(it->second);
    return out;
}

double nonNegativeNumber(const Args& args, const std::string& name, double fallback)
{
    const auto v = args.value(name);
    if (!v) return fallback;
    try {
        size_t used = 0;
        const double d = std::stod(*v, &used);
        if (used != v->size() || !(d >= 0)) throw UsageError("");
        return d;
    } catch (...) {
        throw UsageError(name + " needs a non-negative number, got '" + *v + "'");
    }
}

std::string humanBytes(uint64_t bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0)
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    else
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

void printDataWarnings(const Checkpoint& cp)
{
    for (const auto& w : cp.warnings)
        if (w.code == ReaderCode::ParamOrderAssumed || w.code == ReaderCode::MegatronBucketLayout)
            std::cerr << "warning [" << readerCodeName(w.code) << "] " << w.message
                      << (w.fix.empty() ? "" : "\n    fix: " + w.fix) << "\n";
}

void printLeftOut(const std::vector<std::string>& leftOut)
{
    if (leftOut.empty()) return;
    std::cout << "left out " << leftOut.size() << " value(s) the output cannot hold (each with why):\n";
    for (const auto& l : leftOut)
        std::cout << "  " << l << "\n";
}

void printError(const std::string& command, const std::string& message, const std::string& more)
{
    finishTerminalProgress();
    // the processes of a job share one terminal: each says which it is
    const Job& job = Job::current();
    const std::string who = job.distributed()
        ? " (rank " + std::to_string(job.rank()) + " of " + std::to_string(job.size()) + ")"
        : std::string();
    std::cerr << "optscope-cli" << (command.empty() ? "" : " " + command) << who << ": " << displayText(message) << more
              << std::endl;
}

} // namespace optscope::cli
