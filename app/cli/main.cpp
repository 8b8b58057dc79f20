// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli: the command-line twin of the OptScope GUI. Every subcommand calls the same core functions.
#include "cli_common.h"

#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/base/read_policy.h"
#include "optscope/io/job.h"
#include "optscope/io/storage.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

namespace {

std::string signalName(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
}

/// the local paths among @p args as this process resolves them (an argument that names a file or folder here, or an
/// output's): the same relative path run from another folder is another checkpoint
std::vector<std::string> resolvedPaths(const std::vector<std::string>& args)
{
    std::vector<std::string> out;
    const auto isOutputOption = [](const std::string& o) { return o == "-o" || o == "--output" || o == "--keep"; };
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        bool output = i > 0 && isOutputOption(args[i - 1]);
        if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) { // "--output=rel.pt"
            output = isOutputOption(a.substr(0, eq));
            a = a.substr(eq + 1);
        }
        if (a.empty() || a[0] == '-' || optscope::isUrl(a)
            || !(output || optscope::locationKind(a) != optscope::LocationKind::Missing))
            continue;
        out.push_back(std::filesystem::absolute(a).lexically_normal().string());
    }
    return out;
}

/// a command line as a message shows it: each URL (also an option's "--name=URL") without its query or user info
std::string commandLineText(const nlohmann::json& args)
{
    std::string line;
    for (const auto& arg : args) {
        std::string a = arg.is_string() ? arg.get<std::string>() : arg.dump();
        const size_t eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
        const size_t at = eq == std::string::npos ? 0 : eq + 1;
        if (optscope::isUrl(a.substr(at))) a = a.substr(0, at) + optscope::displayLocation(a.substr(at));
        line += (line.empty() ? "" : " ") + a;
    }
    return line;
}

/// every process of a job must run the same command on the same inputs in a job of the same size: rank 0 compares
/// the command lines, the job's size each process was given (WORLD_SIZE, SLURM_NTASKS) and the paths as each
/// resolves them
void checkSameCommandLine(const std::vector<std::string>& args)
{
    Job& job = Job::current();
    if (!job.distributed()) return;
    nlohmann::json mine = {{"size", job.size()}, {"args", args}, {"paths", resolvedPaths(args)}};
    const std::vector<std::string> all = job.gather("command-line", mine.dump());
    for (size_t r = 1; r < all.size(); ++r) {
        const nlohmann::json theirs = nlohmann::json::parse(all[r], nullptr, false);
        const std::string rank = "rank " + std::to_string(r);
        if (theirs.is_discarded() || theirs.value("size", -1) != job.size())
            throw UsageError(rank + " was told the job has " + std::to_string(theirs.value("size", -1))
                + " processes (WORLD_SIZE or SLURM_NTASKS), rank 0 " + std::to_string(job.size())
                + ": every process of the job must be given the same size");
        if (theirs["args"] != mine["args"]) {
            const std::string line = commandLineText(theirs["args"]);
            // a URL's query (a presigned signature, a SAS token) is never shown: lines that differ only there say so
            const std::string ours = commandLineText(mine["args"]);
            throw UsageError(rank + " runs `optscope-cli " + line + "`, another command line than rank 0's"
                + (line == ours ? std::string(" (their URLs' queries differ; not shown)")
                                : " (`optscope-cli " + ours + "`)")
                + ": every process of the job must run the same one");
        }
        if (theirs["paths"] != mine["paths"]) {
            const auto& a = mine["paths"];
            const auto& b = theirs["paths"];
            size_t i = 0;
            while (i < a.size() && i < b.size() && a[i] == b[i])
                ++i;
            throw UsageError(rank + " resolves the paths of the command line to "
                + (i < b.size() ? b[i].get<std::string>() : std::string("fewer files")) + ", rank 0 to "
                + (i < a.size() ? a[i].get<std::string>() : std::string("fewer files"))
                + ": every process of the job must see the same files (start them in the same folder, or give "
                  "absolute paths)");
        }
    }
}

} // namespace

int runInspect(const std::vector<std::string>& argv);
int runDevices(const std::vector<std::string>& argv);
int runGather(const std::vector<std::string>& argv);
std::vector<OptionSpec> gatherOptions();
int runCheck(const std::vector<std::string>& argv);
std::vector<OptionSpec> checkOptions();
int runReshard(const std::vector<std::string>& argv);
std::vector<OptionSpec> reshardOptions();
int runVerify(const std::vector<std::string>& argv);
std::vector<OptionSpec> verifyOptions();
int runUnflatten(const std::vector<std::string>& argv);
int runDiff(const std::vector<std::string>& argv);
std::vector<OptionSpec> diffOptions();
int runWatch(const std::vector<std::string>& argv);
int runDiagnose(const std::vector<std::string>& argv);
int runFix(const std::vector<std::string>& argv);
int runMap(const std::vector<std::string>& argv);
int runCodes(const std::vector<std::string>& argv);

std::string commandUsage(const std::string& name)
{
    for (const auto& c : commands())
        if (c.name == name) return c.usage;
    return {};
}

const std::vector<Command>& commands()
{
    static const std::vector<Command> list = {
        {"inspect", "list every entry of a checkpoint (keys, dtypes, shapes, chunks, values)",
            "usage: optscope-cli inspect PATH [--json] [--hash] [--threads N] [--raw]\n"
            "\n"
            "PATH is any checkpoint OptScope reads (a file or folder; the format is detected by content).\n"
            "  --json       print {\"format\", \"path\", \"entries\": [...], \"warnings\": [...]}\n"
            "  --hash       add the SHA-256 of every full tensor (row-major C order, little-endian)\n"
            "  --threads N  hashing threads (default: one per core)\n"
            "  --raw        PATH as the one torch.save or safetensors file it is, not the checkpoint it belongs to\n"
            "               (a DeepSpeed rank file: its raw flat partitions and DeepSpeed objects)\n"
            "Exit status: 0 read (warnings allowed), 2 unreadable input or bad usage.\n",
            runInspect},
        {"gather", "write the full state dict as one torch.save file (like dcp_to_torch_save)",
            "usage: optscope-cli gather PATH -o OUT.pt [--only KEY_PREFIX] [--device cpu|cuda] [--json]\n"
            "\n"
            "Assembles every tensor from its chunks and writes one torch.save file that\n"
            "torch.load(OUT, weights_only=True) reads: the same nesting, keys, tensors and values as\n"
            "torch.distributed.checkpoint.format_utils.dcp_to_torch_save writes. Tensor bytes are streamed\n"
            "chunk by chunk; the output appears under its name only when complete.\n"
            "  -o, --output OUT.pt  output file\n"
            "  --only KEY_PREFIX    only entries whose key is KEY_PREFIX or starts with KEY_PREFIX.\n"
            "  --device cpu|cuda    assemble in host memory (default) or on the local GPUs\n"
            "  --no-fsync           skip the fsync before the final rename (faster; not crash-safe)\n"
            "Exit status: 0 written, 2 error (the checkpoint is incomplete, unreadable, or bad usage).\n",
            runGather, gatherOptions},
        {"check", "structural findings: coverage, overlaps, bounds, missing files, empty state, step",
            "usage: optscope-cli check PATH [--json] [--no-data] [--no-crc]\n"
            "\n"
            "Checks every tensor's chunk set (in bounds, no overlaps, full coverage, one dtype, every storage\n"
            "file present and long enough), the CRC-32 of every zip record, NaN and +-inf in every floating\n"
            "tensor (non-finite: counts per key), unsafe pickle globals, and the optimizer state (empty state,\n"
            "step that differs between parameters or ranks).\n"
            "  --json      print {\"clean\": bool, \"findings\": [{\"code\", \"severity\", \"key\", \"message\",\n"
            "              \"ranks\", \"offsets\"}]}\n"
            "  --no-data   metadata only: do not open the chunks themselves (no CRC, no non-finite counts)\n"
            "  --no-crc    do not verify the CRC-32 of zip records\n"
            "Exit status: 0 clean, 1 findings, 2 unreadable input or bad usage.\n",
            runCheck, checkOptions},
        {"diff", "compare two checkpoints (any formats, world sizes, key styles), key by key and number by number",
            "usage: optscope-cli diff A B [--rtol R] [--atol A] [--all] [--engine auto|aten] [--json|--csv]\n"
            "       optscope-cli diff PATH --ranks R1,R2 [--json]\n"
            "\n"
            "Keys are aligned through FQN normalisation: wrapper prefixes (module., _orig_mod.,\n"
            "_fsdp_wrapped_module., _checkpoint_wrapped_module.), integer optimizer ids <-> FQNs (param_names, the\n"
            "other side's param_groups, or the checkpoint's own model), DSD's flattened optimizer format, and a\n"
            "training checkpoint's model part (model., module., state_dict.) against a bare model state dict (a\n"
            "DeepSpeed checkpoint against its zero_to_fp32 output); the report says which normalisation matched each\n"
            "pair. Per key: only in A, only in B, shape or dtype change, max\n"
            "|a-b|, max relative difference, RMS of the difference, number of differing elements, NaN/Inf counts,\n"
            "and per rank which chunks differ. param_groups hyperparameters and step are compared too.\n"
            "  --rtol R, --atol A  equal if |a-b| <= atol + rtol*|b| (default: bit-identical)\n"
            "  --ranks R1,R2       compare what two ranks of one checkpoint hold\n"
            "  --all               also list equal entries\n"
            "  --threads N         tensors compared in parallel (default: one per core)\n"
            "  --engine auto|aten  auto: a fused one-pass kernel for same-dtype float, bf16, fp16, int blocks,\n"
            "                      ATen ops for the rest; aten: ATen ops only (the reference; same report, slower)\n"
            "  --csv               a row per key and per rank (the GUI's CSV export)\n"
            "  --json              {\"equal\": bool, \"entries\": [{\"key\", \"status\", \"reason\", "
            "\"max_abs_diff\",\n"
            "                      \"max_rel_diff\", \"rms_diff\", \"num_diff\", \"numel\", ...}]}\n"
            "Exit status: 0 equal within tolerance, 1 different, 2 error.\n",
            runDiff, diffOptions},
        {"diagnose", "explain missing/unexpected-key errors: what is wrong, PyTorch's error, the fix",
            "usage: optscope-cli diagnose OPTIM [--model MODEL] [--target-optim TARGET] [--world-size M] [--json]\n"
            "\n"
            "OPTIM is any checkpoint holding optimizer state (torch.save file, DCP folder, DeepSpeed, Megatron or\n"
            "Hugging Face checkpoint). MODEL is a model state dict (file or DCP), another optimizer checkpoint, or a\n"
            "text file of expected FQNs (one per line, optionally followed by a shape like 3,4). TARGET is the\n"
            "optimizer the loading code builds (a saved optimizer.state_dict(): its param groups, and which\n"
            "parameters it holds when it holds only the trainable ones); without it, the saved optimizer's groups\n"
            "when they hold as many parameters as the model (a resume), else one group over model.parameters().\n"
            "Notes say what was assumed.\n"
            "Findings use the codes `optscope-cli codes` lists (the same as check's); each says what is wrong, the\n"
            "text PyTorch raises, and the fix. With MODEL, it also says what PyTorch 2.6 does on each load path:\n"
            "optimizer.load_state_dict, set_optimizer_state_dict (strict or not), FSDP.optim_state_dict_to_load,\n"
            "model.load_state_dict: loads (how many parameters get state; whether the first step() works), or the\n"
            "exception and its text.\n"
            "  --world-size M   the data-parallel ranks of the loading run: a DeepSpeed ZeRO checkpoint loads only\n"
            "                   on the world size it was saved by (zero-world-size-change, DeepSpeed's error and the\n"
            "                   way around it)\n"
            "  --json   {\"findings\": [{\"code\", \"severity\", \"message\", \"pytorch_error\", \"fix\", ...}],\n"
            "            \"verdicts\": {PATH: {\"loads\", \"exception\", \"message\", ...}}}\n"
            "Exit status: 0 nothing but information, 1 findings, 2 error.\n",
            runDiagnose},
        {"fix",
            "apply the renames and re-keying diagnose proposes; write the result as a torch.save file or DCP folder",
            "usage: optscope-cli fix OPTIM --model MODEL -o OUT [--target-optim TARGET] [--rename OLD=NEW]... "
            "[--json]\n"
            "\n"
            "Applies what `diagnose OPTIM --model MODEL` proposes (wrapper/prefix renames, renamed layers paired by\n"
            "shape and position, integer ids -> FQNs, flattened -> nested optimizer format, float32 steps) and every\n"
            "--rename (a parameter name or a module prefix: --rename fc1=fc_in renames fc1.weight and fc1.bias), to\n"
            "every part that names parameters: state keys, params, param_names, and the model state dict saved beside\n"
            "the optimizer. Writes OUT as a new DCP folder when OPTIM is one, else as a torch.save file (a "
            "Megatron-Core,\n"
            "DeepSpeed or Trainer folder: its whole state in one file, as gather writes it). TARGET is the optimizer\n"
            "the loading code builds (as for diagnose): turning DSD's flattened format back into param groups needs\n"
            "its groups when the file cannot tell them. OPTIM is never modified;\n"
            "OUT appears only when complete (and synced; --no-fsync skips that).\n"
            "Exit status: 0 written, 2 error (including: nothing to fix).\n",
            runFix},
        {"map", "the parameter table: integer id <-> FQN <-> FSDP1 flat parameter <-> shape <-> states <-> group",
            "usage: optscope-cli map OPTIM [--model MODEL] [--units PREFIX,...] [--world-size N] [--json|--csv]\n"
            "\n"
            "Prints the table the GUI's FQN mapping panel shows, for every optimizer state dict in OPTIM. Integer ids\n"
            "are named from param_names, from raw FSDP1 flat-parameter layouts (MODEL needed), or by position from\n"
            "the model in the same file or MODEL; the source of every name is given.\n"
            "Exit status: 0, or 2 error (also when values the map reads cannot be read: the table is incomplete).\n",
            runMap},
        {"codes", "the finding codes check and diagnose report, with severity and meaning",
            "usage: optscope-cli codes [--json]\n", runCodes},
        {"unflatten", "turn raw per-rank FSDP1 optimizer files into FQN-keyed full state",
            "usage: optscope-cli unflatten RANK_FILE... --model MODEL [--units PREFIX,...] -o OUT.pt [--json]\n"
            "\n"
            "RANK_FILEs are torch.save files of optimizer.state_dict() of an FSDP1 model, one per rank (ordered by\n"
            "the numbers in their names): with use_orig_params=False one flat parameter per FSDP unit (give\n"
            "--units), with use_orig_params=True one id per parameter holding the rank's slice of it (found by\n"
            "their count; the ids follow the model's parameter order). The output equals what\n"
            "get_state_dict(..., full_state_dict=True) gives, keeping the input's nesting ({\"optim\": osd} in,\n"
            "{\"optim\": {\"state\": {fqn: ...}, \"param_groups\": [... \"params\": [fqn, ...]]}} out).\n"
            "  --model MODEL     any checkpoint holding the model's parameters: FQNs, shapes and order (for example\n"
            "                    the FSDP1 DCP checkpoint; its optimizer's param_groups give the exact order)\n"
            "  --units P1,P2     the FSDP-wrapped module prefixes (default: one unit, the root; not needed for\n"
            "                    use_orig_params=True files)\n"
            "  -o, --output OUT  output torch.save file\n"
            "  --no-fsync        skip the fsync before the final rename\n"
            "Exit status: 0 written, 2 error (the error says which parameter does not match the model).\n",
            runUnflatten},
        {"reshard", "write a DCP checkpoint laid out for another world size",
            "usage: optscope-cli reshard PATH --world-size M (-o OUTDIR | --dry-run) [--layout fsdp2|fsdp1]\n"
            "                            [--device cpu|cuda] [--json]\n"
            "\n"
            "Writes a torch.distributed.checkpoint folder (.metadata + __<rank>_0.distcp) laid out for M ranks,\n"
            "that torch.distributed.checkpoint.load reads on M ranks into get_state_dict of an FSDP2 model and\n"
            "optimizer. Non-tensor entries (param_groups, extras) are carried over; a value DCP keeps whole (a\n"
            "tuple, even one holding tensors) stays one item. An optimizer step kept as a Python number (PyTorch\n"
            "before 1.12, Megatron) is written as the float32 tensor that PyTorch's optimizers keep now.\n"
            "  --world-size M       target number of ranks\n"
            "  -o, --output OUTDIR  new folder (must not exist, or be empty)\n"
            "  --layout fsdp2       every tensor as DTensor Shard(0): torch.chunk on dim 0, empty trailing chunks\n"
            "  --layout fsdp1       as FSDP1's SHARDED_STATE_DICT: no chunks for ranks past the last row\n"
            "  --device cpu|cuda    assemble each target chunk in host memory (default) or on the local GPUs\n"
            "                       (the same bytes)\n"
            "  --no-fsync           skip the fsync of each file before the final rename\n"
            "  --dry-run            plan only: chunks and bytes per target rank; reads and writes no tensor data\n"
            "Exit status: 0 written (or planned), 2 error.\n",
            runReshard, reshardOptions},
        {"verify", "reshard to M ranks, load each rank's shard, gather back, compare bit for bit",
            "usage: optscope-cli verify PATH [--world-size M] [--device cpu|cuda] [--keep DIR] [--json|--csv]\n"
            "       optscope-cli verify PATH --against RESHARDED [--json|--csv]\n"
            "\n"
            "Verify by load, offline: gathers PATH, reshards it to M ranks (FSDP2 Shard(0), written to disk),\n"
            "loads each rank's shard from those files as that rank would (on the local GPUs with --device cuda:\n"
            "one rank per GPU when there are enough, else several per GPU; NCCL all-gathers them back), gathers\n"
            "again and compares bit for bit with the source. The report lists, per key and per rank, what differs.\n"
            "  --world-size M  ranks to reshard to (default: the source's number of ranks)\n"
            "  --device        cpu (default) or cuda\n"
            "  --keep DIR      keep the resharded checkpoint in DIR (a new folder)\n"
            "  --against B     compare PATH with B, a resharded copy made by any tool (PyTorch itself, say),\n"
            "                  per key and per chunk of B\n"
            "Exit status: 0 bit-identical, 1 not, 2 error.\n",
            runVerify, verifyOptions},
        {"watch", "follow a training run's checkpoint folder: what each new step changed",
            "usage: optscope-cli watch DIR [--once] [--interval S] [--json] [--top N] [--rtol R] [--atol A]\n"
            "\n"
            "Follows a run's checkpoint folder (step_100/, checkpoint-200/, ckpt_300.pt, ...) as the GUI's Watch "
            "panel\n"
            "does: each step once its files stopped changing and it opens, in step order, compared with the step\n"
            "before; a line per step (how many keys changed, the tensors that changed most, step counters left out).\n"
            "A step still being written is waited for and said so on stderr; one that never opens is skipped once a\n"
            "later one is complete. Runs until Ctrl-C. DIR may be an s3:// or gs:// prefix (listed at every look).\n"
            "  --once          read the steps that are complete now, then exit (a CI job)\n"
            "  --interval S    seconds between two looks at the folder (default 1.5, at least 0.1)\n"
            "  --json          one JSON object per step (step, name, path, status, entries, changed, top)\n"
            "  --top N         most changed keys per step (default 3)\n"
            "Exit status: 0 (also when stopped by Ctrl-C), 2 error.\n",
            runWatch},
        {"devices", "list the GPUs (CUDA, NCCL) available for gather/verify", "usage: optscope-cli devices [--json]\n",
            runDevices},
    };
    return list;
}

} // namespace optscope::cli

int main(int argc, char** argv)
{
    using namespace optscope::cli;
    escapeStandardStreams();
    std::vector<std::string> args(argv + 1, argv + argc);
    // asked for (--help): stdout, as a pager or grep expects; a command line without a command: stderr
    auto usage = [](std::ostream& to) {
        to << "usage: optscope-cli COMMAND [ARGS...]\n\ncommands:\n";
        for (const auto& c : commands())
            to << "  " << c.name << std::string(c.name.size() < 10 ? 10 - c.name.size() : 1, ' ') << c.synopsis << "\n";
        to << "\n'optscope-cli COMMAND --help' shows a command's options.\n"
              "--allow-outside-reads (with any command) reads data files that a checkpoint's metadata places\n"
              "outside its folder (absolute paths, '..', symlinks out of it); by default they are not read.\n"
              "--remote-stats (with any command) prints what remote reads cost: requests, bytes, retries.\n"
              "\nA PATH may be a URL: s3://BUCKET/KEY, gs://BUCKET/KEY, http(s)://HOST/PATH (read in place with\n"
              "ranged requests; credentials and endpoint as AWS tools take them: AWS_ACCESS_KEY_ID,\n"
              "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_ENDPOINT_URL, AWS_REGION; "
              "CURL_CA_BUNDLE).\n";
    };
    if (args.empty()) {
        usage(std::cerr);
        return ExitError;
    }
    // help in a job (torchrun and srun start every process with one command line): rank 0 prints it, the others
    // stay quiet, and no process waits for the others to meet (a malformed job environment: printed, as alone)
    // (-h as an option's value, '-o -h', is no help: left to the command, job and all)
    // a job's command reads its line with its own options ('--json --help' is help, '-o -h' names an output -h);
    // a line it cannot read is no help, and fails alike in every process; any other command is run alone in any
    // case, and its help is any --help or -h not right after another option
    bool helpAsked = args[0] == "help" || args[0] == "--help" || args[0] == "-h";
    const auto command
        = std::find_if(commands().begin(), commands().end(), [&](const Command& c) { return c.name == args[0]; });
    const auto isGlobalOption
        = [](const std::string& a) { return a == "--allow-outside-reads" || a == "--remote-stats"; };
    if (command != commands().end() && command->jobOptions) {
        std::vector<std::string> own; // the command's line without the global options, which any command takes
        std::copy_if(args.begin() + 1, args.end(), std::back_inserter(own),
            [&](const std::string& a) { return !isGlobalOption(a); });
        try {
            helpAsked = Args(own, command->jobOptions()).has("--help");
        } catch (const UsageError&) { }
    } else {
        for (size_t i = 0; i < args.size(); ++i)
            helpAsked = helpAsked || ((args[i] == "--help" || args[i] == "-h") && (i == 0 || args[i - 1][0] != '-'));
    }
    if (helpAsked) {
        try {
            if (optscope::jobSpecFromEnvironment().rank != 0) return ExitOk;
        } catch (const optscope::Error&) { }
    }
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        usage(std::cout);
        return ExitOk;
    }
    if (args[0] == "--version") {
        std::cout << "optscope-cli " << OPTSCOPE_VERSION << std::endl;
        return ExitOk;
    }
    // a global option, before or after the command: read data files outside the checkpoint folder (a .metadata or
    // index that names ../x or /x, a symlink out of the folder), as PyTorch's own loaders do
    // --remote-stats: what the remote reads cost, on stderr when the command ends (requests, bytes, retries)
    bool remoteStats = false;
    // what the processes of a job compare: the whole command line, global options too (a rank that may read outside
    // the checkpoint and one that may not gave a report that matched no one-process run; found by a hunt)
    const std::vector<std::string> commandLine = args;
    for (auto it = args.begin(); it != args.end();)
        if (!isGlobalOption(*it)) {
            ++it;
        } else {
            if (*it == "--allow-outside-reads") optscope::allowReadsOutsideCheckpoint(true);
            if (*it == "--remote-stats") remoteStats = true;
            it = args.erase(it);
        }
    struct PrintRemoteStats
    {
        bool on;
        ~PrintRemoteStats()
        {
            if (!on) return;
            const auto s = optscope::remoteTransferStats();
            std::cerr << "remote: " << s.requests << " requests, " << s.bytesFetched << " bytes fetched, " << s.retries
                      << " retries, at most " << s.peakHeld << " bytes held" << std::endl;
        }
    } printRemoteStats {remoteStats};
    // objects whose server gave nothing to hold the reads to (no ETag, no Last-Modified): a change while they were
    // read went unseen, which is said rather than left to trust (once, by the process that speaks for a job)
    struct SayUnpinned
    {
        ~SayUnpinned()
        {
            const std::string note = optscope::unpinnedObjectsNote(optscope::remoteTransferStats());
            if (!note.empty() && optscope::Job::current().isRoot())
                std::cerr << "optscope-cli: note: " << note << std::endl;
            for (const auto& undone : optscope::killedRunsNotes()) // (by the process that undid it)
                std::cerr << "optscope-cli: note: " << undone << std::endl;
        }
    } sayUnpinned;
    if (args.empty()) {
        usage(std::cerr);
        return ExitError;
    }
    const std::string name = args[0];
    installInterruptHandlers();
    // the first interrupting signal ends the work and every wait: on remote storage (a stalled server) and on the
    // job's other processes (a rendezvous, a gather), which torchrun and srun stop with SIGTERM
    const optscope::CancelScope scope([] { return interruptingSignal() != 0; });
    for (const auto& c : commands()) {
        if (c.name != name) continue;
        // started by torchrun or srun as several processes: the commands that split their work join the job
        optscope::Job& job = optscope::Job::current();
        try {
            if (helpAsked) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
            const optscope::JobSpec spec = optscope::jobSpecFromEnvironment();
            if (spec.size > 1 && !c.jobOptions) {
                std::string jobCommands;
                for (const auto& other : commands())
                    if (other.jobOptions) jobCommands += (jobCommands.empty() ? "" : ", ") + other.name;
                throw UsageError("'" + name + "' runs as one process, but this is rank " + std::to_string(spec.rank)
                    + " of " + std::to_string(spec.size) + " (" + spec.launcher
                    + " variables are set); run it alone. As a job: " + jobCommands);
            }
            optscope::Job::join(spec);
        } catch (const UsageError& e) {
            printError(name, e.what());
            return ExitError;
        } catch (const optscope::Error& e) {
            // rank 0 published why the job cannot start (a rank never joined): it serves the store, so it stays
            // until those that joined have read that, rather than leave them only "lost the job's store"
            job.leave();
            if (const int sig = interruptingSignal(); sig && e.kind() == optscope::ErrorKind::Cancelled) {
                printError(name, "stopped by " + signalName(sig) + " while the job's processes met");
                return 128 + sig;
            }
            printError(name, e.what());
            return ExitError;
        }
        struct LeaveJob
        {
            optscope::Job& job;
            ~LeaveJob() { job.leave(); }
        } leave {job};
        try {
            checkSameCommandLine(commandLine);
            const int rc = c.run(std::vector<std::string>(args.begin() + 1, args.end()));
            // findings or differences (exit 1) that may be the store's failures, not the checkpoint's: a CI job
            // that runs check or diff must not read "damaged" or "different" when the store was down
            if (const auto stats = optscope::remoteTransferStats(); rc == ExitFindings && stats.readFailures) {
                const std::string why = "reading from storage failed (" + std::to_string(stats.readFailures)
                    + " read(s) failed, retried where a retry could help; the first: " + stats.firstReadFailure
                    + "): what is reported above as unreadable may be the store's failure, not the checkpoint's";
                job.reportFailure(why);
                printError(name, why);
                return ExitError;
            }
            return rc;
        } catch (const UsageError& e) {
            // every process says what is wrong; the usage text once, from rank 0 (not once per process)
            job.reportFailure(e.what());
            printError(name, e.what(), job.isRoot() ? "\n" + c.usage : std::string());
            return ExitError;
        } catch (const optscope::Error& e) {
            const std::vector<std::string> left = optscope::remoteLeftBehind();
            std::string leftText;
            for (const auto& l : left)
                leftText += "\n  left behind: " + l;
            if (const int sig = interruptingSignal(); sig && e.kind() == optscope::ErrorKind::Cancelled) {
                printError(name, "stopped by " + signalName(sig),
                    left.empty() ? "; no output was left behind" : "; what could not be undone:" + leftText);
                job.reportFailure("stopped by a signal");
                return 128 + sig;
            }
            job.reportFailure(e.what());
            if (job.failedAfterAnother() && e.kind() != optscope::ErrorKind::Cancelled
                && e.detail().rfind("stopped: ", 0) != 0) {
                // another process failed first: what went wrong here may be its effect (rank 0 removed the
                // temporary folder this process wrote into), so the cause comes first
                printError(
                    name, "stopped: " + job.failure(), "\n  then here: " + optscope::displayText(e.what()) + leftText);
                return ExitError;
            }
            printError(name, e.what(), leftText);
            return ExitError;
        } catch (const std::exception& e) {
            const std::string what = optscope::unexpectedErrorText(e);
            job.reportFailure(what);
            printError(name, what);
            return ExitError;
        }
    }
    printError("", "unknown command '" + name + "'");
    usage(std::cerr);
    return ExitError;
}
