// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/unsafe_globals.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/format_registry.h"

#include <set>
#include <unordered_set>

namespace optscope {

namespace {

void collect(const PyValue* v, std::set<std::string>& out, std::unordered_set<const PyValue*>& seen, int depth)
{
    if (!v || depth > 500) return;
    if (v->kind == PyKind::Global) {
        // not marked seen: a class memoized once and used by many entries is attributed to each of them
        if (!v->global->known) out.insert(v->global->path());
        return;
    }
    if (!seen.insert(v).second) return;
    switch (v->kind) {
    case PyKind::Object: {
        const auto& o = *v->object;
        collect(o.callable, out, seen, depth + 1);
        collect(o.args, out, seen, depth + 1);
        collect(o.kwargs, out, seen, depth + 1);
        collect(o.state, out, seen, depth + 1);
        for (const auto* i : o.listItems)
            collect(i, out, seen, depth + 1);
        for (const auto* i : o.dictItems)
            collect(i, out, seen, depth + 1);
        return;
    }
    case PyKind::Tensor:
        if (v->tensor->wrapper)
            for (const auto& s : v->tensor->wrapper->shards)
                collect(s.tensor, out, seen, depth + 1);
        return;
    default:
        if (v->hasContainer()) {
            for (const auto* i : v->container->items)
                collect(i, out, seen, depth + 1);
            collect(v->container->attrs, out, seen, depth + 1);
        }
    }
}

} // namespace

void collectUnsafeGlobals(const PyValue* v, std::set<std::string>& out)
{
    std::unordered_set<const PyValue*> seen;
    collect(v, out, seen, 0);
}

void collectUnsafeGlobals(const PyValue* v, std::set<std::string>& out, std::unordered_set<const PyValue*>& seen)
{
    collect(v, out, seen, 0);
}

bool isWriterLibraryClass(CheckpointFormat format, const std::string& classPath)
{
    const std::string prefix = formatInfo(format).writerClassPrefix;
    return !prefix.empty() && classPath.rfind(prefix, 0) == 0;
}

bool isPureDataClass(const std::string& classPath)
{
    // io.BytesIO pickles as _io.BytesIO: NEWOBJ, then BUILD with (bytes, position, __dict__)
    return classPath == "_io.BytesIO" || classPath == "io.BytesIO";
}

bool isLoaderDataClass(CheckpointFormat format, const std::string& classPath)
{
    return formatInfo(format).loaderReadsDataObjects && isPureDataClass(classPath);
}

const char* writerLibraryName(CheckpointFormat format)
{
    return formatInfo(format).writerLibrary;
}

UnsafeGlobals findUnsafeGlobals(const Checkpoint& checkpoint)
{
    UnsafeGlobals out;
    std::set<std::string> all, library, data;
    // the writer's own classes, and pure data its loader reads, go apart: they are not what the warning is about
    auto keep = [&](const std::set<std::string>& found) {
        std::vector<std::string> unsafe;
        for (const auto& path : found) {
            const FindingCode kind = globalFinding(checkpoint.format, path);
            if (kind == FindingCode::LibraryGlobal) {
                library.insert(path);
            } else if (kind == FindingCode::DcpDataGlobal) {
                data.insert(path);
            } else {
                unsafe.push_back(path);
                all.insert(path);
            }
        }
        return unsafe;
    };
    for (const auto& w : checkpoint.warnings) {
        if (w.code != ReaderCode::UnsafeGlobal) continue;
        const Entry* e = w.key.empty() ? nullptr : checkpoint.find(w.key);
        if (e && !e->isTensor()) {
            std::set<std::string> found;
            collectUnsafeGlobals(e->value, found);
            const std::vector<std::string> unsafe = keep(found);
            if (!unsafe.empty() && !out.byKey.count(w.key)) out.byKey[w.key] = unsafe;
            continue;
        }
        // not held by an entry (a global only the file's other pickles name)
        if (!w.classPath.empty()) keep({w.classPath});
    }
    out.classPaths.assign(all.begin(), all.end());
    out.libraryClassPaths.assign(library.begin(), library.end());
    out.dataClassPaths.assign(data.begin(), data.end());
    return out;
}

FindingCode globalFinding(CheckpointFormat format, const std::string& classPath)
{
    if (isWriterLibraryClass(format, classPath)) return FindingCode::LibraryGlobal;
    if (isLoaderDataClass(format, classPath)) return FindingCode::DcpDataGlobal;
    return FindingCode::UnsafeGlobal;
}

WarningLabel warningLabel(const Checkpoint& checkpoint, const CheckpointWarning& warning)
{
    if (warning.code == ReaderCode::UnsafeGlobal && !warning.classPath.empty()) {
        const FindingCode f = globalFinding(checkpoint.format, warning.classPath);
        if (f != FindingCode::UnsafeGlobal) return {findingName(f), severityName(findingInfo(f).severity)};
    }
    return {readerCodeName(warning.code), warning.isError ? "error" : "warning"};
}

} // namespace optscope
