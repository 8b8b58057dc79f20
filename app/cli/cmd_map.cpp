// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli map OPTIM [--model MODEL] [--json|--csv]: the parameter table the GUI's FQN panel shows.
// optscope-cli codes: the registry of finding codes check and diagnose share.
#include "cli_common.h"

#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/storage.h"
#include "optscope/model/finding.h"
#include "optscope/optim/param_table.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace optscope::cli {

int runMap(const std::vector<std::string>& argv)
{
    const Args args(argv,
        {{"--model", true, "model checkpoint naming ids (by position) and FSDP1 flat parameters"},
            {"--units", true, "FSDP1 unit prefixes, comma separated"}, {"--world-size", true, "FSDP1 world size"},
            {"--json", false, "print JSON"}, {"--csv", false, "print CSV"}, {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << args.help("map");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("map takes exactly one OPTIM path");
    if (args.has("--json") && args.has("--csv")) throw UsageError("--json and --csv exclude each other");
    const Progress progress = terminalProgress();
    CheckpointPtr cp = keptUntilExit(openCheckpoint(args.positional()[0], progress));
    CheckpointPtr model;
    std::optional<ModelParams> reference;
    if (auto m = args.value("--model")) {
        model = keptUntilExit(openCheckpoint(*m, progress));
        reference = ModelParams::fromCheckpoint(*model);
    }
    ParamTableOptions options;
    if (auto u = args.value("--units")) {
        std::stringstream ss(*u);
        std::string part;
        while (std::getline(ss, part, ','))
            if (!part.empty()) options.units.push_back(part);
    }
    if (args.has("--world-size")) options.worldSize = parseWorldSize(args);
    const ParamTable table = ParamTable::build(*cp, reference ? &*reference : nullptr, model.get(), options);
    finishTerminalProgress();
    if (args.has("--json")) {
        auto j = table.toJson();
        j["path"] = optscope::displayLocation(cp->path);
        std::cout << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
    } else if (args.has("--csv")) {
        table.writeCsv(std::cout);
    } else {
        for (size_t i = 0; i < table.optimizers.size(); ++i)
            std::cout << "optimizer '" << table.optimizers[i].rootKey() << "': " << optimizerKindName(table.kinds[i])
                      << ", " << table.optimizers[i].groups.size() << " group(s)"
                      << (table.optimizers[i].groupsGuessed ? " (a guess: the flattened format stores no grouping)"
                                                            : "")
                      << ", " << (table.optimizers[i].idKeyed ? "integer ids" : "FQN keys")
                      << (table.sources[i] == NameSource::None || table.sources[i] == NameSource::StateKey
                                     || table.sources[i] == NameSource::FlattenedKey
                                 ? std::string()
                                 : std::string(", named by ") + nameSourceText(table.sources[i]))
                      << "\n";
        std::cout << std::left << std::setw(6) << "ID" << std::setw(44) << "FQN" << std::setw(6) << "GROUP"
                  << std::setw(14) << "SHAPE" << std::setw(15) << "CONFIDENCE"
                  << "STATES / NOTE\n";
        for (const auto& r : table.rows) {
            std::string states;
            for (const auto& s : r.states)
                states += (states.empty() ? "" : ",") + s;
            // FQN-keyed state has no ids: its position in param_groups is what optimizer.state_dict() would use
            // (a reader that re-keyed integer ids by FQN keeps the file's id in the row)
            const bool ids = r.optimizer >= 0
                && (table.optimizers[static_cast<size_t>(r.optimizer)].idKeyed || (!r.id.empty() && r.id != r.fqn));
            const std::string id = ids ? r.id : r.position >= 0 ? std::to_string(r.position) : std::string("-");
            std::cout << std::setw(6) << id << std::setw(44) << (r.fqn.empty() ? "?" : r.fqn) << std::setw(6)
                      << (r.group < 0 ? std::string("-") : std::to_string(r.group)) << std::setw(14)
                      << (r.shape.empty() && r.numel < 0 ? std::string("?") : shapeText(r.shape)) << std::setw(15)
                      << (r.confidence == Confidence::None ? std::string("-") : confidenceText(r.confidence)) << states
                      << (r.note.empty() ? "" : "  (" + r.note + ")") << "\n";
        }
        for (const auto& n : table.notes)
            std::cout << "note: " << n << "\n";
    }
    // the map reads values (param_groups, param_names, ids), not tensor data: one it could not read (a data file
    // missing, refused or unreadable) leaves the table incomplete, which exit 0 hid (found by a hunt)
    // (what names and groups the parameters: a group's params and param_names; an unreadable hyperparameter or a
    // rank's own note changes nothing in the table; found by a review hunt)
    const auto readByTheMap = [&](const Entry& e) {
        const bool naming = std::any_of(e.path.begin(), e.path.end(),
            [](const KeyPathElem& p) { return !p.isIndex() && (p.key == "params" || p.key == "param_names"); });
        if (!naming) return false;
        for (const auto& o : table.optimizers)
            if (o.rootKey().empty() || e.key.rfind(o.rootKey() + ".", 0) == 0) return true;
        return false;
    };
    for (const auto& e : cp->entries) {
        if (e.isTensor() || e.error.empty() || !readByTheMap(e)) continue;
        const std::string why = e.key + ": " + e.error.str(); // it names the file and what became of it
        printError("map",
            displayLocation(cp->path) + ": values the map reads cannot be read, so the table is incomplete: " + why);
        return ExitError;
    }
    return ExitOk;
}

int runCodes(const std::vector<std::string>& argv)
{
    const Args args(argv, {{"--json", false, "print JSON"}, {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << args.help("codes");
        return ExitOk;
    }
    if (args.has("--json")) {
        nlohmann::ordered_json j = nlohmann::ordered_json::array();
        for (const auto& c : findingRegistry())
            j.push_back({{"code", c.name}, {"severity", severityName(c.severity)}, {"meaning", c.meaning}});
        std::cout << j.dump(2) << std::endl;
        return ExitOk;
    }
    size_t width = 0; // the longest code and two spaces: "zero-world-size-mismatch" ran into its severity
    for (const auto& c : findingRegistry())
        width = std::max(width, std::strlen(c.name) + 2);
    for (const auto& c : findingRegistry())
        std::cout << std::left << std::setw(static_cast<int>(width)) << c.name << std::setw(9)
                  << severityName(c.severity) << c.meaning << "\n";
    return ExitOk;
}

} // namespace optscope::cli
