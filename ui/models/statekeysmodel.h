// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/key_filter.h"
#include "optscope/formats/unsafe_globals.h"
#include "optscope/model/checkpoint.h"

#include <QAbstractItemModel>

#include <atomic>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace optscope::ui {

class KeyTree;

/// The checkpoint's keys as a tree over a prebuilt KeyTree. Lazy: a node's children become rows only when the view
/// asks for them (canFetchMore/fetchMore on expansion), so opening 100k keys costs nothing but the top level.
/// Filtering (optscope::KeyFilter: words, wildcards, /regex/, dtype:, nan, inf, |x|) keeps the matching leaves and
/// their ancestors; value predicates need the value facts (setValueFacts), read in the background by the panel.
class StateKeysModel : public QAbstractItemModel
{
    Q_OBJECT
public:
    enum Columns { NameColumn, TypeColumn, ShapeColumn, NumelColumn, BytesColumn, RanksColumn, ColumnCount };
    enum Roles {
        SortRole = Qt::UserRole, ///< numbers as numbers
        KeyRole, ///< the node's full key (QString)
        IsEntryRole, ///< bool: a leaf (an entry)
        UnsafeRole, ///< QStringList: the unsafe global class paths the entry's value names (empty for none)
    };

    explicit StateKeysModel(QObject* parent = nullptr);
    ~StateKeysModel() override;

    void setData(CheckpointPtr checkpoint, std::shared_ptr<const KeyTree> tree);
    void setFilter(const QString& text);
    QString filter() const { return m_filter; }
    const KeyFilter& keyFilter() const { return m_keyFilter; }
    /// the filter asks about values (nan, inf, |x|) that have not been read yet
    bool filterWaitsForValues() const { return m_keyFilter.needsValues() && !m_facts; }
    /// what scanValueFacts read of the checkpoint's entries (kept until the next checkpoint); re-applies the filter
    void setValueFacts(std::shared_ptr<const std::vector<ValueFacts>> facts);
    bool hasValueFacts() const { return m_facts != nullptr; }
    /// leaves matching the filter (all leaves without a filter)
    int matchingLeaves() const { return m_matching; }
    /// the checkpoint's unsafe globals (pickled class paths outside the safe set, kept inert)
    const UnsafeGlobals& unsafeGlobals() const { return m_unsafe; }

    /// the index of a key's node, fetching the rows on the way; invalid if the key is unknown or filtered out
    QModelIndex indexForKey(const QString& key);

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    bool hasChildren(const QModelIndex& parent = {}) const override;
    bool canFetchMore(const QModelIndex& parent) const override;
    void fetchMore(const QModelIndex& parent) override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    int nodeOf(const QModelIndex& index) const;
    const std::vector<int>& visibleChildren(int node) const;
    int visibleRow(int node) const;
    void rebuildFilter();
    void endReset();
    QString scalarText(int node, const Entry& entry) const;
    /// reads the queued scalars of a remote checkpoint on the thread pool (a request each, or a window of them: never
    /// on the UI thread), unless a read is running; scalarsRead shows them
    void readScalarsInBackground() const;
    void scalarsRead(quint64 generation, const std::vector<std::pair<int, QString>>& texts);

    CheckpointPtr m_checkpoint;
    std::shared_ptr<const KeyTree> m_tree;
    QString m_filter;
    KeyFilter m_keyFilter;
    std::shared_ptr<const std::vector<ValueFacts>> m_facts;
    int m_matching = 0;
    /// with a filter: the visible children and row of every node (empty = no filter)
    std::vector<std::vector<int>> m_filteredChildren;
    std::vector<int> m_filteredRow;
    /// whether a node's children have been fetched (exposed as rows)
    std::vector<char> m_fetched;
    bool m_changing = false; ///< a reset or insertion is being announced
    mutable std::unordered_map<int, QString> m_scalarText;
    mutable std::vector<std::pair<int, const Entry*>> m_scalarQueue; ///< remote scalars shown, not read yet
    mutable bool m_scalarReading = false; ///< a background read is running
    quint64 m_generation = 0; ///< setData's count: a read for an earlier checkpoint is dropped
    /// set to stop the background read of scalars running (a checkpoint replaced, the model gone): its requests to a
    /// stalled server are given up (CancelScope) rather than waited out on the application's thread pool
    mutable std::shared_ptr<std::atomic<bool>> m_scalarStop;
    UnsafeGlobals m_unsafe; ///< node -> value of a one-element tensor
};

} // namespace optscope::ui
