// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace optscope::cli {

/// Exit codes shared by every command: 0 success/clean, 1 findings/differences, 2 error or bad usage.
enum ExitCode { ExitOk = 0, ExitFindings = 1, ExitError = 2 };

struct OptionSpec
{
    OptionSpec(std::string n, bool value, std::string h, std::string shortN = {})
        : name(std::move(n))
        , takesValue(value)
        , help(std::move(h))
        , shortName(std::move(shortN))
    { }
    std::string name; ///< "--json"
    bool takesValue = false;
    std::string help;
    std::string shortName; ///< "-o", optional
};

/// Parsed command line of one subcommand.
class Args
{
public:
    /// throws UsageError on unknown options or missing values
    Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs);
    bool has(const std::string& name) const { return m_values.count(name) > 0; }
    std::optional<std::string> value(const std::string& name) const;
    std::vector<std::string> values(const std::string& name) const;
    const std::vector<std::string>& positional() const { return m_positional; }
    /// @p command's help text (commandUsage), then a line from its spec for each option the text does not name:
    /// an option is declared once, and --help can never leave one out
    std::string help(const std::string& command) const;

private:
    std::vector<OptionSpec> m_specs;
    std::multimap<std::string, std::string> m_values;
    std::vector<std::string> m_positional;
};

struct UsageError : std::runtime_error
{
    using std::runtime_error::runtime_error;
};

struct Command
{
    std::string name;
    std::string synopsis; ///< one line for the command list
    std::string usage; ///< full help text
    int (*run)(const std::vector<std::string>& args);
    /// set for the commands that split their work over the processes of a torchrun/srun job: their options, so
    /// that a job's processes know before they meet whether the command line asks for help
    std::vector<OptionSpec> (*jobOptions)() = nullptr;
};

const std::vector<Command>& commands();

/// Keeps @p object allocated until the process exits, and returns it: a command's large inputs and results (a
/// checkpoint of a million values, a report of a million rows) are then not freed allocation by allocation as the
/// command returns (a seventh of a 1M-value diff's time); the exit frees them at once. For the commands that read
/// their inputs once (not watch, which opens step after step). Main thread only.
template<class T> std::shared_ptr<T> keptUntilExit(std::shared_ptr<T> object)
{
    static auto* kept = new std::vector<std::shared_ptr<const void>>; // never freed: still reachable at exit
    kept->push_back(object);
    return object;
}
/// the full help text of a command
std::string commandUsage(const std::string& name);

/// the reader's warnings that change what an output names or holds (param-order-assumed: optimizer ids named by a
/// guessed order; megatron-bucket-layout: moments left flat), on stderr, for the commands that write outputs
void printDataWarnings(const Checkpoint& checkpoint);
/// "left out N value(s) the output cannot hold (each with why):" and one indented line each; nothing when
/// @p leftOut is empty (gather and reshard)
void printLeftOut(const std::vector<std::string>& leftOut);
/// --world-size M: a positive integer (at most 2^20); throws UsageError when it is missing or not one
int parseWorldSize(const Args& args);
/// a non-negative number option (--rtol 1e-5, --interval 0.5): @p fallback when absent; throws UsageError when it
/// is not one
double nonNegativeNumber(const Args& args, const std::string& name, double fallback = 0.0);
/// formats 1536 as "1.5 KiB"
std::string humanBytes(uint64_t bytes);
/// prints "optscope-cli <cmd>: <message>" on stderr, on one line: a newline the message quotes from a file (a tag in
/// DeepSpeed's `latest`, a key) is shown escaped, so that it cannot forge a line; @p more (the usage, what was left
/// behind), our own text, follows as it is
void printError(const std::string& command, const std::string& message, const std::string& more = {});

/// Makes std::cout and std::cerr escape control and bidi characters (displayText, newlines kept): every text a
/// command prints is safe on a terminal, whatever the checkpoint's keys hold. Called once by main.
void escapeStandardStreams();

/// Installs the handlers of SIGINT, SIGTERM and SIGHUP: the first one cancels the running command (terminalProgress's
/// cancel predicate), so that it stops at its next check and removes its temporaries; a second one ends the process
/// at once (the default action).
void installInterruptHandlers();
/// the signal that asked to stop, or 0
int interruptingSignal();

/// A Progress that draws a bar on stderr when stderr is a terminal (and nothing otherwise), and that is cancelled
/// by an interrupting signal.
Progress terminalProgress();
void finishTerminalProgress();

} // namespace optscope::cli
