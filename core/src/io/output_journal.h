// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// What a run writes to object storage that only the run itself would finish or undo: the multipart uploads it starts
// (an object appears only when its upload completes; an upload never completed stays, unseen and billed, until it is
// aborted) and the DCP folder outputs it begins (data objects first, `.metadata` last). A run that fails undoes them
// itself; a run killed (SIGKILL, the OOM killer, a node's reboot of the job step) cannot.
//
// So each is written, before it starts, to this process's journal: a text file in
// $XDG_STATE_HOME/optscope/outputs (~/.local/state/optscope/outputs), one line each, "upload URL ID" or
// "folder URL WRITER_TAG", and "settled URL ID" once the run completed or undid it. The journal goes when the process
// exits with everything settled. The next run on this machine that writes to object storage reads the journals of
// processes that have ended (process_identity.h: a live run's is never touched) and undoes what they left: it aborts
// each upload by its id and removes the objects under each folder that carry that run's writer tag (another writer's
// objects are kept), then says so. What it cannot undo (the store refuses, or other credentials) stays journalled and
// is said; the next run tries again.

#include <string>

namespace optscope {

enum class JournalledOutput { Upload, Folder };

/// journals @p url's multipart upload @p id, or the folder output at @p url whose objects carry the writer tag @p id
/// and whose object @p lastObject (a DCP folder's `.metadata`) is written last, before it starts: a folder that holds
/// @p lastObject is whole, and never undone (its settled line lost). Best effort: a journal that cannot be written is
/// no reason to fail the output
void journalOutput(
    JournalledOutput kind, const std::string& url, const std::string& id, const std::string& lastObject = {});
/// the output journalOutput() named is complete, or undone by this run
void journalSettled(const std::string& url, const std::string& id);

/// undoes what runs killed on this machine left on object storage (their journals, as above), once per process:
/// called before a run writes to object storage. What was undone, or could not be, is said by killedRunsNotes()
/// (storage.h)
void undoKilledRuns();

} // namespace optscope
