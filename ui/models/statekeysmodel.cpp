// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/statekeysmodel.h"

#include "optscope/base/display_text.h"
#include "optscope/base/progress.h"

#include "common/format.h"
#include "session/keytree.h"

#include "optscope/io/storage.h"
#include "optscope/tensor/scalar_value.h"

#include <QApplication>
#include <QColor>
#include <QGuiApplication>
#include <QPalette>
#include <QPointer>
#include <QStyle>
#include <QThreadPool>

namespace optscope::ui {

namespace {
const std::vector<int> kNoChildren;

/// a one-element tensor's cell: its value, or its shape when it cannot be read (the error shows in Tensor details)
QString scalarCellText(const Checkpoint& checkpoint, const Entry& entry)
{
    try {
        return QString::fromStdString(scalarValueText(checkpoint, entry).value_or(std::string()));
    } catch (const std::exception&) {
        return Format::shape(entry.tensor->shape);
    }
}
} // namespace

StateKeysModel::StateKeysModel(QObject* parent)
    : QAbstractItemModel(parent)
{ }

StateKeysModel::~StateKeysModel()
{
    if (m_scalarStop) m_scalarStop->store(true);
}

void StateKeysModel::setData(CheckpointPtr checkpoint, std::shared_ptr<const KeyTree> tree)
{
    beginResetModel();
    m_checkpoint = std::move(checkpoint);
    m_tree = std::move(tree);
    m_scalarText.clear();
    m_scalarQueue.clear();
    ++m_generation;
    if (m_scalarStop) m_scalarStop->store(true); // a read for the checkpoint replaced
    m_facts.reset();
    m_unsafe = m_checkpoint ? findUnsafeGlobals(*m_checkpoint) : UnsafeGlobals {};
    rebuildFilter();
    endReset();
}

void StateKeysModel::setFilter(const QString& text)
{
    const QString t = text.trimmed();
    if (t == m_filter) return;
    beginResetModel();
    m_filter = t;
    m_keyFilter = KeyFilter::parse(t.toStdString());
    rebuildFilter();
    endReset();
}

void StateKeysModel::setValueFacts(std::shared_ptr<const std::vector<ValueFacts>> facts)
{
    beginResetModel();
    m_facts = std::move(facts);
    rebuildFilter();
    endReset();
}

void StateKeysModel::endReset()
{
    // observers walk the fresh model while modelReset is announced: nothing may be fetched (inserted) meanwhile
    m_changing = true;
    endResetModel();
    m_changing = false;
}

void StateKeysModel::rebuildFilter()
{
    m_filteredChildren.clear();
    m_filteredRow.clear();
    m_fetched.assign(m_tree ? static_cast<size_t>(m_tree->size()) : 0, 0);
    if (!m_tree) {
        m_matching = 0;
        return;
    }
    if (!m_fetched.empty()) m_fetched[KeyTree::Root] = 1; // the top level is always there
    if (m_filter.isEmpty()) {
        m_matching = m_tree->node(KeyTree::Root).leaves;
        return;
    }
    const int n = m_tree->size();
    std::vector<char> visible(static_cast<size_t>(n), 0);
    if (!m_checkpoint) {
        m_matching = 0;
        return;
    }
    const auto& entries = m_checkpoint->entries;
    const bool haveFacts = m_facts && m_facts->size() == entries.size();
    m_matching = 0;
    for (int i = 1; i < n; ++i) {
        const auto& node = m_tree->node(i);
        if (node.entry < 0) continue;
        const auto e = static_cast<size_t>(node.entry);
        if (!m_keyFilter.matches(node.key, &entries[e], haveFacts ? &(*m_facts)[e] : nullptr)) continue;
        ++m_matching;
        for (int a = i; a > 0 && !visible[static_cast<size_t>(a)]; a = m_tree->node(a).parent)
            visible[static_cast<size_t>(a)] = 1;
    }
    m_filteredChildren.assign(static_cast<size_t>(n), {});
    m_filteredRow.assign(static_cast<size_t>(n), 0);
    for (int i = 1; i < n; ++i) {
        if (!visible[static_cast<size_t>(i)]) continue;
        auto& siblings = m_filteredChildren[static_cast<size_t>(m_tree->node(i).parent)];
        m_filteredRow[static_cast<size_t>(i)] = static_cast<int>(siblings.size());
        siblings.push_back(i);
    }
    // nodes are created parent-first in key order, so children lists come out in file order
}

const std::vector<int>& StateKeysModel::visibleChildren(int node) const
{
    if (!m_tree) return kNoChildren;
    if (m_filter.isEmpty()) return m_tree->node(node).children;
    return m_filteredChildren[static_cast<size_t>(node)];
}

int StateKeysModel::visibleRow(int node) const
{
    return m_filter.isEmpty() ? m_tree->node(node).row : m_filteredRow[static_cast<size_t>(node)];
}

int StateKeysModel::nodeOf(const QModelIndex& index) const
{
    return index.isValid() ? static_cast<int>(index.internalId()) : KeyTree::Root;
}

QModelIndex StateKeysModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!m_tree || row < 0 || column < 0 || column >= ColumnCount || parent.column() > 0) return {};
    const int p = nodeOf(parent);
    if (!m_fetched[static_cast<size_t>(p)]) return {};
    const auto& children = visibleChildren(p);
    if (row >= static_cast<int>(children.size())) return {};
    return createIndex(row, column, static_cast<quintptr>(children[static_cast<size_t>(row)]));
}

QModelIndex StateKeysModel::parent(const QModelIndex& child) const
{
    if (!child.isValid() || !m_tree) return {};
    const int p = m_tree->node(static_cast<int>(child.internalId())).parent;
    if (p <= KeyTree::Root) return {};
    return createIndex(visibleRow(p), 0, static_cast<quintptr>(p));
}

int StateKeysModel::rowCount(const QModelIndex& parent) const
{
    if (!m_tree || parent.column() > 0) return 0;
    const int p = nodeOf(parent);
    return m_fetched[static_cast<size_t>(p)] ? static_cast<int>(visibleChildren(p).size()) : 0;
}

int StateKeysModel::columnCount(const QModelIndex& parent) const
{
    return parent.column() > 0 ? 0 : ColumnCount;
}

bool StateKeysModel::hasChildren(const QModelIndex& parent) const
{
    if (!m_tree || parent.column() > 0) return false;
    return !visibleChildren(nodeOf(parent)).empty();
}

bool StateKeysModel::canFetchMore(const QModelIndex& parent) const
{
    if (!m_tree || parent.column() > 0 || m_changing) return false;
    const int p = nodeOf(parent);
    return !m_fetched[static_cast<size_t>(p)] && !visibleChildren(p).empty();
}

void StateKeysModel::fetchMore(const QModelIndex& parent)
{
    if (!canFetchMore(parent)) return;
    const int p = nodeOf(parent);
    const int n = static_cast<int>(visibleChildren(p).size());
    // observers of the insertion may walk the model: no nested fetch while the rows are being announced
    m_changing = true;
    beginInsertRows(parent, 0, n - 1);
    m_fetched[static_cast<size_t>(p)] = 1;
    endInsertRows();
    m_changing = false;
}

QModelIndex StateKeysModel::indexForKey(const QString& key)
{
    if (!m_tree) return {};
    const int node = m_tree->find(key.toStdString());
    if (node <= KeyTree::Root) return {};
    // the chain of ancestors, root first; each must be visible under the filter
    std::vector<int> chain;
    for (int n = node; n > KeyTree::Root; n = m_tree->node(n).parent)
        chain.push_back(n);
    QModelIndex parentIndex;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const int p = nodeOf(parentIndex);
        const auto& children = visibleChildren(p);
        const int row = visibleRow(*it);
        if (row >= static_cast<int>(children.size()) || children[static_cast<size_t>(row)] != *it) return {};
        if (canFetchMore(parentIndex)) fetchMore(parentIndex);
        parentIndex = index(row, 0, parentIndex);
    }
    return parentIndex;
}

QVariant StateKeysModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || !m_tree) return {};
    const auto& node = m_tree->node(static_cast<int>(index.internalId()));
    const Entry* entry = node.entry >= 0 ? &m_checkpoint->entries[static_cast<size_t>(node.entry)] : nullptr;
    const int col = index.column();
    if (role == KeyRole) return QString::fromStdString(node.key);
    const auto unsafe = entry ? m_unsafe.byKey.find(node.key) : m_unsafe.byKey.end();
    const bool isUnsafe = unsafe != m_unsafe.byKey.end();
    if (role == UnsafeRole) {
        QStringList paths;
        if (isUnsafe)
            for (const auto& p : unsafe->second)
                paths << QString::fromStdString(p);
        return paths;
    }
    // a name with control or direction characters is shown escaped, and marked: it was made to mislead
    const bool escapedName = col == NameColumn && needsDisplayEscape(node.key);
    if (role == Qt::DecorationRole) {
        if ((isUnsafe || escapedName) && col == NameColumn)
            return QApplication::style()->standardIcon(QStyle::SP_MessageBoxWarning);
        return {};
    }
    if (role == IsEntryRole) return entry != nullptr;
    if (role == Qt::TextAlignmentRole) {
        if (col == NumelColumn || col == BytesColumn) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    }
    if (role == Qt::ForegroundRole) {
        if (entry && !entry->error.empty()) return QColor(Qt::red);
        if (isUnsafe) return QColor(0xb3, 0x1b, 0x1b);
        if (escapedName) return QColor(0xb3, 0x5c, 0x00);
        if (!entry && col != NameColumn) return QGuiApplication::palette().color(QPalette::Disabled, QPalette::Text);
        return {};
    }
    if (role == Qt::ToolTipRole) {
        QString tip = Format::fromStd(displayText(node.key));
        if (needsDisplayEscape(node.key))
            tip += QLatin1Char('\n')
                + tr("This name holds control or text-direction characters (shown as \\x.. / \\u.. escapes): "
                     "what a terminal or a plain label would show is not the name.");
        if (entry && !entry->error.empty()) tip += QLatin1Char('\n') + QString::fromStdString(entry->error);
        if (isUnsafe) {
            QStringList paths;
            for (const auto& p : unsafe->second)
                paths << QString::fromStdString(p);
            tip += QLatin1Char('\n')
                + tr("Unsafe globals, kept inert (torch.load with weights_only=False would import and call them): %1")
                      .arg(paths.join(QLatin1String(", ")));
        }
        if (entry && !entry->isTensor() && entry->value)
            tip += QLatin1Char('\n') + QString::fromStdString(pyRepr(entry->value, 2000));
        return tip;
    }
    if (role != Qt::DisplayRole && role != SortRole) return {};
    const bool sort = role == SortRole;
    switch (col) {
    case NameColumn:
        return node.name.isEmpty() ? tr("(root)") : node.name;
    case TypeColumn:
        if (!entry) return sort ? QVariant(QString()) : QVariant();
        if (entry->isTensor())
            return QString::fromLatin1(
                dtypeName(entry->tensor->dtype).data(), static_cast<qsizetype>(dtypeName(entry->tensor->dtype).size()));
        return QString::fromLatin1(pyKindName(entry->value->kind)).toLower();
    case ShapeColumn:
        if (!entry) return sort ? QVariant(node.leaves) : QVariant(tr("%n key(s)", nullptr, node.leaves));
        if (entry->isTensor()) {
            if (!sort && isScalarEntry(*entry)) return scalarText(static_cast<int>(index.internalId()), *entry);
            return Format::shape(entry->tensor->shape);
        }
        return QString::fromStdString(pyRepr(entry->value, 80));
    case NumelColumn:
        if (sort) return static_cast<qlonglong>(node.numel);
        if (!entry && node.tensors == 0) return {};
        if (entry && !entry->isTensor()) return {};
        return Format::count(node.numel);
    case BytesColumn:
        if (sort) return static_cast<qulonglong>(node.bytes);
        if (node.tensors == 0) return {};
        return Format::bytes(node.bytes);
    case RanksColumn:
        if (!entry || !entry->isTensor()) return sort ? QVariant(QString()) : QVariant();
        return Format::ranks(entry->tensor->ranks());
    default:
        return {};
    }
}

QString StateKeysModel::scalarText(int node, const Entry& entry) const
{
    // `step` and other one-element tensors show their value, read once (one element from a mapped file) and kept
    auto it = m_scalarText.find(node);
    if (it != m_scalarText.end()) return it->second;
    if (isUrl(m_checkpoint->path)) {
        // a remote value is a request away: read on the thread pool, its shape shown until it is there
        const QString shape = Format::shape(entry.tensor->shape);
        m_scalarText.emplace(node, shape);
        m_scalarQueue.emplace_back(node, &entry);
        readScalarsInBackground();
        return shape;
    }
    const QString text = scalarCellText(*m_checkpoint, entry);
    m_scalarText.emplace(node, text);
    return text;
}

void StateKeysModel::readScalarsInBackground() const
{
    if (m_scalarReading || m_scalarQueue.empty()) return;
    m_scalarReading = true;
    // the checkpoint is kept alive by the read (its entries with it); the model may be gone when it ends
    QPointer<StateKeysModel> self(const_cast<StateKeysModel*>(this));
    m_scalarStop = std::make_shared<std::atomic<bool>>(false);
    QThreadPool::globalInstance()->start([self, checkpoint = m_checkpoint, generation = m_generation,
                                             queue = std::move(m_scalarQueue), stop = m_scalarStop] {
        const CancelScope scope([stop] { return stop->load(); });
        std::vector<std::pair<int, QString>> texts;
        texts.reserve(queue.size());
        for (const auto& [node, entry] : queue)
            texts.emplace_back(node, scalarCellText(*checkpoint, *entry));
        QCoreApplication* app = QCoreApplication::instance(); // none once the application is gone
        if (!app) return;
        QMetaObject::invokeMethod(
            app,
            [self, generation, texts = std::move(texts)] {
                if (self) self->scalarsRead(generation, texts);
            },
            Qt::QueuedConnection);
    });
    m_scalarQueue.clear();
}

void StateKeysModel::scalarsRead(quint64 generation, const std::vector<std::pair<int, QString>>& texts)
{
    m_scalarReading = false;
    if (generation == m_generation) {
        for (const auto& [node, text] : texts) {
            m_scalarText[node] = text;
            // the row, where it is shown (its parent fetched, not filtered out)
            const int parentNode = m_tree->node(node).parent;
            if (parentNode < KeyTree::Root || !m_fetched[static_cast<size_t>(parentNode)]) continue;
            const int row = visibleRow(node);
            if (row < 0) continue;
            const QModelIndex cell = createIndex(row, ShapeColumn, static_cast<quintptr>(node));
            emit dataChanged(cell, cell, {Qt::DisplayRole});
        }
    }
    readScalarsInBackground(); // those asked for meanwhile
}

QVariant StateKeysModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case NameColumn:
        return tr("Key");
    case TypeColumn:
        return tr("Type");
    case ShapeColumn:
        return tr("Shape / value");
    case NumelColumn:
        return tr("Numel");
    case BytesColumn:
        return tr("Bytes");
    case RanksColumn:
        return tr("Ranks");
    default:
        return {};
    }
}

} // namespace optscope::ui
