// SPDX-License-Identifier: GPL-3.0-or-later
// Every item model under QAbstractItemModelTester, on real fixtures, with the values they must show.
#include "guitest.h"

#include "common/format.h"
#include "models/chunklistmodel.h"
#include "models/diagnosismodel.h"
#include "models/diffmodel.h"
#include "models/fqnmappingmodel.h"
#include "models/statekeysmodel.h"
#include "models/statusfilterproxy.h"
#include "models/tensorstatsmodel.h"
#include "models/valuespreviewmodel.h"
#include "models/verifymodel.h"
#include "optscope/model/element_decoder.h"
#include "plots/shardlayoutwidget.h"
#include "session/fqnmapping.h"
#include "session/keytree.h"

#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/tensor/tensor_stats.h"

#include <QAbstractItemModelTester>
#include <QDir>

#include <QElapsedTimer>
#include <QRegularExpression>
#include <QTreeView>
#include <QWheelEvent>
#include <mutex>

using namespace optscope;
using namespace optscope::ui;

namespace {

CheckpointPtr open(const char* name)
{
    return openCheckpoint(testData(name).toStdString());
}

/// walks every index (fetching lazily populated rows) so the tester sees the whole model
int visitAll(QAbstractItemModel* model, const QModelIndex& parent = {})
{
    if (model->canFetchMore(parent)) model->fetchMore(parent);
    int n = 0;
    for (int r = 0; r < model->rowCount(parent); ++r) {
        for (int c = 0; c < model->columnCount(parent); ++c)
            (void)model->data(model->index(r, c, parent));
        ++n;
        n += visitAll(model, model->index(r, 0, parent));
    }
    return n;
}

QStringList childNames(QAbstractItemModel* model, const QModelIndex& parent)
{
    if (model->canFetchMore(parent)) model->fetchMore(parent);
    QStringList names;
    for (int r = 0; r < model->rowCount(parent); ++r)
        names << model->index(r, 0, parent).data().toString();
    return names;
}

QModelIndex child(QAbstractItemModel* model, const QModelIndex& parent, const QString& name)
{
    if (model->canFetchMore(parent)) model->fetchMore(parent);
    for (int r = 0; r < model->rowCount(parent); ++r)
        if (model->index(r, 0, parent).data().toString() == name) return model->index(r, 0, parent);
    return {};
}

} // namespace

class TestModels : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void stateKeysTree();
    void stateKeysFilter();
    void stateKeysOpensHundredThousandKeysFast();
    void stateKeysEscapeAndMarkHostileNames();
    void chunkList();
    void shardLayoutGroupsThousandsOfRanks();
    void shardLayoutOfAFileWithoutRanksHasOneLane();
    void tensorStats();
    void valuesPreview();
    void elementDecoder();
    void fqnMappingFqnKeyed();
    void fqnMappingIdKeyedByModelOrder();
    void fqnMappingFsdp1Raw();
    void fqnNormalize();
    void diffModel();
    void diagnosisModel();
    void diagnosisModelGroupsAlikeFindings();
    void verifyModel();
    void format();
};

void TestModels::stateKeysTree()
{
    const CheckpointPtr cp = open("fsdp2_r3");
    StateKeysModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setData(cp, KeyTree::build(*cp));
    QCOMPARE(childNames(&model, {}), (QStringList {QStringLiteral("model"), QStringLiteral("optim")}));
    const QModelIndex optim = child(&model, {}, QStringLiteral("optim"));
    QCOMPARE(childNames(&model, optim), (QStringList {QStringLiteral("state"), QStringLiteral("param_groups")}));
    // an FQN stays one node: optim / state / blocks.0.qkv.weight / exp_avg
    const QModelIndex state = child(&model, optim, QStringLiteral("state"));
    const QModelIndex qkv = child(&model, state, QStringLiteral("blocks.0.qkv.weight"));
    QVERIFY(qkv.isValid());
    QCOMPARE(childNames(&model, qkv),
        (QStringList {QStringLiteral("exp_avg"), QStringLiteral("exp_avg_sq"), QStringLiteral("step")}));
    const QModelIndex expAvg = child(&model, qkv, QStringLiteral("exp_avg"));
    auto cell = [&](int column) { return model.index(expAvg.row(), column, qkv).data().toString(); };
    QCOMPARE(cell(StateKeysModel::TypeColumn), QStringLiteral("float32"));
    QCOMPARE(cell(StateKeysModel::ShapeColumn), QStringLiteral("[7, 6]"));
    QCOMPARE(cell(StateKeysModel::NumelColumn), QStringLiteral("42"));
    QCOMPARE(cell(StateKeysModel::BytesColumn), QStringLiteral("168 B"));
    QCOMPARE(cell(StateKeysModel::RanksColumn), QStringLiteral("r0-2"));
    QCOMPARE(
        expAvg.data(StateKeysModel::KeyRole).toString(), QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg"));
    QVERIFY(expAvg.data(StateKeysModel::IsEntryRole).toBool());
    // inner nodes aggregate: the parameter's three states are 42 + 42 + 1 elements
    QCOMPARE(
        model.index(qkv.row(), StateKeysModel::NumelColumn, state).data(StateKeysModel::SortRole).toLongLong(), 85);
    // every node reachable, every entry a leaf
    QCOMPARE(visitAll(&model), KeyTree::build(*cp)->size() - 1);
    // indexForKey fetches its way down
    StateKeysModel fresh;
    fresh.setData(cp, KeyTree::build(*cp));
    const QModelIndex found = fresh.indexForKey(QStringLiteral("optim.param_groups.0.lr"));
    QVERIFY(found.isValid());
    QCOMPARE(found.data().toString(), QStringLiteral("lr"));
    QCOMPARE(fresh.index(found.row(), StateKeysModel::ShapeColumn, found.parent()).data().toString(),
        QStringLiteral("0.001"));
    QVERIFY(!fresh.indexForKey(QStringLiteral("no.such.key")).isValid());
}

void TestModels::stateKeysFilter()
{
    const CheckpointPtr cp = open("fsdp2_r3");
    StateKeysModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setData(cp, KeyTree::build(*cp));
    model.setFilter(QStringLiteral("QKV.WEIGHT.EXP_AVG_SQ"));
    QCOMPARE(model.matchingLeaves(), 2); // blocks.0 and blocks.1, case-insensitive
    QCOMPARE(childNames(&model, {}), QStringList {QStringLiteral("optim")});
    visitAll(&model);
    QVERIFY(model.indexForKey(QStringLiteral("optim.state.blocks.1.qkv.weight.exp_avg_sq")).isValid());
    QVERIFY(!model.indexForKey(QStringLiteral("optim.state.blocks.1.qkv.weight.exp_avg")).isValid());
    model.setFilter(QStringLiteral("step"));
    QCOMPARE(model.matchingLeaves(), 16); // one step per parameter
    model.setFilter(QStringLiteral("nothing matches this"));
    QCOMPARE(model.rowCount(), 0);
    model.setFilter(QString());
    QCOMPARE(model.matchingLeaves(), static_cast<int>(cp->entries.size()));
}

void TestModels::stateKeysEscapeAndMarkHostileNames()
{
    // keys with terminal escapes, a newline and a bidi override (tests/data/hostile, made by real torch.save): shown
    // escaped, marked with the warning icon and colour, and the tooltip says why; a plain name is neither
    const CheckpointPtr cp = open("hostile/evil_keys.pt");
    StateKeysModel model;
    model.setData(cp, KeyTree::build(*cp));
    const QStringList names = childNames(&model, {});
    QVERIFY(names.contains(QStringLiteral("evil\\u202egpj.exe")));
    QVERIFY(names.contains(QStringLiteral("title\\x1b]0;pwned\\x07")));
    QVERIFY(names.contains(QStringLiteral("forged\\x0afake.row  float32  [1]")));
    for (const QString& n : names)
        for (const QChar c : n)
            QVERIFY2(c.unicode() >= 0x20 && c.unicode() != 0x202e && c.unicode() != 0x7f, qPrintable(n));
    const QModelIndex evil = child(&model, {}, QStringLiteral("evil\\u202egpj.exe"));
    QVERIFY(evil.data(Qt::DecorationRole).isValid());
    QVERIFY(evil.data(Qt::ForegroundRole).isValid());
    QVERIFY(evil.data(Qt::ToolTipRole).toString().contains(QStringLiteral("text-direction")));
    // the key itself stays exact (selection, copy, lookups)
    QCOMPARE(evil.data(StateKeysModel::KeyRole).toString(), QString::fromUtf8("evil\u202egpj.exe"));
    const QModelIndex plain = child(&model, {}, QStringLiteral("+SUM(1,2)"));
    QVERIFY(plain.isValid());
    QVERIFY(!plain.data(Qt::DecorationRole).isValid());
}

void TestModels::stateKeysOpensHundredThousandKeysFast()
{
    // 100k keys shaped like a large FSDP optimizer: optim.state.<fqn>.<state>
    auto cp = std::make_shared<Checkpoint>();
    cp->path = "synthetic";
    cp->entries.reserve(100000);
    for (int i = 0; cp->entries.size() < 100000; ++i) {
        const std::string fqn = "layers." + std::to_string(i / 8) + ".block.w" + std::to_string(i % 8);
        for (const char* name : {"exp_avg", "exp_avg_sq", "step"}) {
            if (cp->entries.size() == 100000) break;
            Entry e;
            e.path = {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"), KeyPathElem::fromKey(fqn),
                KeyPathElem::fromKey(name)};
            e.key = joinKeyPath(e.path);
            e.kind = EntryKind::Tensor;
            e.tensor->dtype = DType::Float32;
            e.tensor->shape = {4096, 1024};
            cp->entries.push_back(std::move(e));
        }
    }
    cp->buildIndex();
    QElapsedTimer timer;
    timer.start();
    const auto tree = KeyTree::build(*cp);
    StateKeysModel model;
    model.setData(cp, tree);
    QTreeView view;
    view.setUniformRowHeights(true);
    view.setModel(&model);
    view.resize(800, 600);
    view.show();
    view.expand(model.index(0, 0));
    const QModelIndex state = model.index(0, 0, model.index(0, 0));
    view.expand(state);
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QCoreApplication::processEvents();
    const qint64 ms = timer.elapsed();
    qInfo("100k keys: tree built, model set and view shown in %lld ms", static_cast<long long>(ms));
    QVERIFY2(ms < 1000, qPrintable(QStringLiteral("took %1 ms").arg(ms)));
    QCOMPARE(model.rowCount(state), 33334);
    model.setFilter(QStringLiteral("layers.4000.block.w3"));
    QCOMPARE(model.matchingLeaves(), 3);
}

void TestModels::chunkList()
{
    const CheckpointPtr cp = open("fsdp2_r3");
    ChunkListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    // 4 rows on 3 ranks: torch.chunk gives 2 + 2 + an empty chunk on rank 2
    const Entry* e = cp->find("optim.state.blocks.0.head.weight.exp_avg");
    QVERIFY(e);
    model.setData(cp, e);
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.index(0, ChunkListModel::RankColumn).data().toString(), QStringLiteral("0"));
    QCOMPARE(model.index(1, ChunkListModel::OffsetsColumn).data().toString(), QStringLiteral("[2, 0]"));
    QCOMPARE(model.index(1, ChunkListModel::SizesColumn).data().toString(), QStringLiteral("[2, 5]"));
    QCOMPARE(model.index(2, ChunkListModel::NumelColumn).data().toString(), QStringLiteral("0"));
    QCOMPARE(model.index(0, ChunkListModel::BytesColumn).data().toString(), QStringLiteral("40 B"));
    QVERIFY(model.index(0, ChunkListModel::FileColumn).data().toString().endsWith(QLatin1String(".distcp")));
    model.setData(cp, cp->find("optim.param_groups.0.lr"));
    QCOMPARE(model.rowCount(), 0);
}

void TestModels::shardLayoutOfAFileWithoutRanksHasOneLane()
{
    // a torch.save file's tensor: one chunk of unknown rank is one "no rank" lane (there was an empty "rank 0" lane
    // above it, "0 elements", seen in a real X session)
    auto cp = openCheckpoint(testData("diff/step3.pt").toStdString());
    const Entry* e = cp->find("optim.state.0.weight.exp_avg");
    QVERIFY(e);
    ShardLayoutWidget w;
    w.resize(640, 300);
    w.setShardLayout(ShardLayout::of(*e->tensor));
    QCOMPARE(w.laneCount(), 1);
    QCOMPARE(w.lastRank(), -1);
    const QString tip = w.toolTipAt(QPoint(400, 90)); // inside the one lane
    QVERIFY2(tip.startsWith(QLatin1String("rank none recorded")), qPrintable(QStringLiteral("[%1]").arg(tip)));
    w.setRankRange(0, 3); // nothing to zoom into: stays as it is
    QCOMPARE(w.laneCount(), 1);
}

void TestModels::shardLayoutGroupsThousandsOfRanks()
{
    // the 16-rank index of a 70B-shaped model (PyTorch's classes): four ranks share a lane when only ~7 lanes fit
    auto cp = openCheckpoint(testData("scale/r16_l1").toStdString());
    const Entry* e = cp->find("model.model.layers.0.self_attn.q_proj.weight");
    QVERIFY(e);
    ShardLayoutWidget w;
    w.resize(640, 150);
    w.setShardLayout(ShardLayout::of(*e->tensor));
    QCOMPARE(w.laneCount(), 16);
    QCOMPARE(w.ranksPerLane(), 4);
    const QString tip = w.toolTipAt(QPoint(200, 40));
    // lane 0 holds ranks 0-3: the chunk under the cursor is one of theirs
    QVERIFY2(QRegularExpression(QStringLiteral("^rank [0-3], chunk")).match(tip).hasMatch(), qPrintable(tip));
    // a rank range: one lane per rank again
    w.setRankRange(4, 7);
    QCOMPARE(w.ranksPerLane(), 1);
    QCOMPARE(w.firstRank(), 4);
    QCOMPARE(w.lastRank(), 7);
    // 1,024 ranks on dim 0 of a [128256, 8192] tensor, as FSDP2 shards it: 32 ranks per lane at 700 px, Ctrl+wheel
    // zooms into the ranks under the cursor, double-click shows them all again
    TensorEntry big;
    big.dtype = DType::Float32;
    big.shape = {128256, 8192};
    const int64_t rows = (128256 + 1023) / 1024;
    for (int r = 0; r < 1024; ++r) {
        const int64_t off[2] = {std::min<int64_t>(r * rows, 128256), 0};
        const int64_t size[2] = {std::max<int64_t>(0, std::min<int64_t>(rows, 128256 - off[0])), 8192};
        big.chunks.appendBox(r, off, size, 2);
    }
    w.resize(900, 700);
    QElapsedTimer timer;
    timer.start();
    w.setShardLayout(ShardLayout::of(big));
    const QPixmap shot = w.grab(); // paints every lane
    QVERIFY(!shot.isNull());
    QVERIFY2(timer.elapsed() < 2000, qPrintable(QString::number(timer.elapsed())));
    QCOMPARE(w.laneCount(), 1024);
    QCOMPARE(w.ranksPerLane(), 32);
    // rows of ranks 0-31 are the first 1/32 of the axis: a chunk of theirs near the left, the lane's name further right
    QVERIFY2(QRegularExpression(QStringLiteral("^rank ([0-9]|[12][0-9]|3[01]), chunk"))
                 .match(w.toolTipAt(QPoint(100, 40)))
                 .hasMatch(),
        qPrintable(w.toolTipAt(QPoint(100, 40))));
    QVERIFY2(w.toolTipAt(QPoint(600, 40)).startsWith(QStringLiteral("r0–31, row")),
        qPrintable(w.toolTipAt(QPoint(600, 40))));
    QWheelEvent zoom(QPointF(300, 40), w.mapToGlobal(QPointF(300, 40)), QPoint(), QPoint(0, 120 * 8), Qt::NoButton,
        Qt::ControlModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(&w, &zoom);
    QVERIFY(w.lastRank() - w.firstRank() + 1 < 1024);
    QVERIFY(w.ranksPerLane() < 32);
    QCOMPARE(w.firstRank(), 0);
    QMouseEvent dbl(QEvent::MouseButtonDblClick, QPointF(300, 40), w.mapToGlobal(QPointF(300, 40)), Qt::LeftButton,
        Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &dbl);
    QCOMPARE(w.ranksPerLane(), 32);
}

void TestModels::tensorStats()
{
    const CheckpointPtr cp = open("fsdp2_r3");
    TensorStatsModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 0);
    model.setData(computeTensorStats(*cp, *cp->find("optim.state.blocks.0.qkv.weight.exp_avg"), 8));
    QCOMPARE(model.rowCount(), static_cast<int>(TensorStatsModel::RowCount));
    // PyTorch 2.6: torch.min/max/std/norm of the gathered tensor
    QCOMPARE(model.index(TensorStatsModel::Min, 1).data(TensorStatsModel::ValueRole).toDouble(), -0.35204219818115234);
    QCOMPARE(model.index(TensorStatsModel::Max, 1).data(TensorStatsModel::ValueRole).toDouble(), 0.15582334995269775);
    QVERIFY(
        qAbs(model.index(TensorStatsModel::Std, 1).data(TensorStatsModel::ValueRole).toDouble() - 0.11267490445591472)
        < 1e-12);
    QCOMPARE(model.index(TensorStatsModel::Min, 1).data().toString(), QStringLiteral("-0.3520422"));
    QCOMPARE(model.index(TensorStatsModel::Std, 0).data().toString(), QStringLiteral("std"));
    QCOMPARE(model.index(TensorStatsModel::NaNs, 1).data().toString(), QStringLiteral("0"));
    model.setData(std::nullopt);
    QCOMPARE(model.rowCount(), 0);
}

void TestModels::valuesPreview()
{
    const CheckpointPtr dtypes = open("dtypes.pt");
    ValuesPreviewModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    // torch.arange(10) as a 1-D column from row 3
    model.setData(ValuesPreviewModel::read(*dtypes, *dtypes->find("layouts.view_whole"), 3, 4, 32));
    QCOMPARE(model.rowCount(), 4);
    QCOMPARE(model.columnCount(), 1);
    QCOMPARE(model.index(0, 0).data().toString(), QStringLiteral("3"));
    QCOMPARE(model.index(3, 0).data(ValuesPreviewModel::ValueRole).toDouble(), 6.0);
    QCOMPARE(model.headerData(0, Qt::Vertical).toString(), QStringLiteral("3"));
    // the transposed (non-contiguous) [6, 4] view of randn(4, 6): rows 2..3, first 3 columns = base[0:3, 2:4].T
    const auto full = ValuesPreviewModel::read(*dtypes, *dtypes->find("dtypes.float32"), 0, 4, 32);
    model.setData(ValuesPreviewModel::read(*dtypes, *dtypes->find("layouts.transposed"), 2, 2, 3));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), 3);
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c)
            QCOMPARE(model.index(r, c).data(ValuesPreviewModel::ValueRole).toDouble(),
                full.values[static_cast<size_t>(c * 6 + (r + 2))]);
    // bool and a sharded DCP tensor (rows from two ranks' files)
    model.setData(ValuesPreviewModel::read(*dtypes, *dtypes->find("dtypes.bool"), 0, 1, 2));
    QVERIFY(model.index(0, 0).data().toString() == QLatin1String("True")
        || model.index(0, 0).data().toString() == QLatin1String("False"));
    const CheckpointPtr dcp = open("fsdp2_r3");
    const Entry* qkv = dcp->find("optim.state.blocks.0.qkv.weight.exp_avg");
    const auto window = ValuesPreviewModel::read(*dcp, *qkv, 1, 4, 6);
    QCOMPARE(window.rows, 4);
    QCOMPARE(window.columns, 6);
    // the minimum PyTorch reports must be among the 42 values, the row window matches the full read
    const auto all = ValuesPreviewModel::read(*dcp, *qkv, 0, 7, 6);
    for (size_t i = 0; i < window.values.size(); ++i)
        QCOMPARE(window.values[i], all.values[i + 6]);
    QVERIFY(
        std::find(all.values.begin(), all.values.end(), static_cast<double>(static_cast<float>(-0.35204219818115234)))
        != all.values.end());
    // a 0-dim tensor
    model.setData(ValuesPreviewModel::read(*dtypes, *dtypes->find("layouts.scalar"), 0, 10, 10));
    QCOMPARE(model.rowCount(), 1);
    QCOMPARE(model.index(0, 0).data().toString(), QStringLiteral("3.5"));
    model.clear();
    QCOMPARE(model.rowCount(), 0);
}

void TestModels::elementDecoder()
{
    const uint8_t half[] = {0x00, 0x3c}; // 1.0
    QCOMPARE(ElementDecoder::decode(half, DType::Float16), 1.0);
    const uint8_t bf[] = {0x80, 0xbf}; // -1.0
    QCOMPARE(ElementDecoder::decode(bf, DType::BFloat16), -1.0);
    const uint8_t e4m3[] = {0x38}; // 1.0 in float8_e4m3fn
    QCOMPARE(ElementDecoder::decode(e4m3, DType::Float8_e4m3fn), 1.0);
    const uint8_t c64[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}; // 1 - 2j
    QCOMPARE(ElementDecoder::decode(c64, DType::Complex64), 1.0);
    QCOMPARE(ElementDecoder::imaginary(c64, DType::Complex64), -2.0);
    // every float dtype of dtypes.pt decodes to nearly the float64 values
    const CheckpointPtr cp = open("dtypes.pt");
    const auto ref = ValuesPreviewModel::read(*cp, *cp->find("dtypes.float64"), 0, 4, 6).values;
    for (const char* key : {"dtypes.float32", "dtypes.float16", "dtypes.bfloat16", "dtypes.float8_e5m2"}) {
        const auto v = ValuesPreviewModel::read(*cp, *cp->find(key), 0, 4, 6).values;
        QCOMPARE(v.size(), ref.size());
        for (size_t i = 0; i < v.size(); ++i)
            QVERIFY2(qAbs(v[i] - ref[i]) <= 0.13 * qAbs(ref[i]) + 1e-3, key);
    }
}

void TestModels::fqnMappingFqnKeyed()
{
    const CheckpointPtr cp = open("fsdp2_r3");
    FqnMappingModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setData(FqnMapping::build(*cp, findOptimizers(*cp), nullptr, {}));
    QCOMPARE(model.rowCount(), 16);
    QCOMPARE(model.index(0, FqnMappingModel::IdColumn).data().toString(), QStringLiteral("0"));
    QCOMPARE(model.index(0, FqnMappingModel::FqnColumn).data().toString(), QStringLiteral("blocks.0.qkv.weight"));
    QCOMPARE(model.index(0, FqnMappingModel::ShapeColumn).data().toString(), QStringLiteral("[7, 6]"));
    QCOMPARE(
        model.index(0, FqnMappingModel::StatesColumn).data().toString(), QStringLiteral("exp_avg, exp_avg_sq, step"));
    QCOMPARE(model.index(15, FqnMappingModel::FqnColumn).data().toString(), QStringLiteral("out.bias"));
    QCOMPARE(model.index(0, 0).data(FqnMappingModel::JumpKeyRole).toString(),
        QStringLiteral("optim.state.blocks.0.qkv.weight"));
}

void TestModels::fqnMappingIdKeyedByModelOrder()
{
    // torch.compile: the model part says _orig_mod.0.weight, the optimizer uses ids 0..3
    const CheckpointPtr cp = open("compiled.pt");
    const FqnMapping m = FqnMapping::build(*cp, findOptimizers(*cp), nullptr, {});
    QCOMPARE(m.rows.size(), size_t(4));
    QCOMPARE(m.rows[0].id, QStringLiteral("0"));
    QCOMPARE(m.rows[0].fqn, QStringLiteral("_orig_mod.0.weight"));
    QCOMPARE(m.rows[0].normalized, QStringLiteral("0.weight"));
    QCOMPARE(m.rows[0].shape, (std::vector<int64_t> {5, 6}));
    QCOMPARE(m.rows[3].fqn, QStringLiteral("_orig_mod.2.bias"));
    QVERIFY(m.rows[0].note.isEmpty());
    // without a model the ids stay unnamed
    const CheckpointPtr ids = open("adam_int.pt");
    const FqnMapping unnamed = FqnMapping::build(*ids, findOptimizers(*ids), nullptr, {});
    QCOMPARE(unnamed.rows.size(), size_t(4));
    QVERIFY(unnamed.rows[1].fqn.isEmpty());
    QCOMPARE(unnamed.rows[1].shape, (std::vector<int64_t> {5}));
    // ... and a reference model names them by position
    const FqnMapping named = FqnMapping::build(*ids, findOptimizers(*ids), open("compiled.pt").get(), {});
    QCOMPARE(named.rows[1].fqn, QStringLiteral("_orig_mod.0.bias"));
}

void TestModels::fqnMappingFsdp1Raw()
{
    // raw FSDP1 rank file: 3 flat parameters (root: out.*, then blocks.0, blocks.1); the model names them
    const CheckpointPtr rank0 = open("fsdp1_raw_r2/optim_rank0.pt");
    const CheckpointPtr model = open("fsdp1_r2");
    FqnMappingModel fm;
    QAbstractItemModelTester tester(&fm, QAbstractItemModelTester::FailureReportingMode::QtTest);
    fm.setData(FqnMapping::build(*rank0, findOptimizers(*rank0), model.get(), {}));
    const FqnMapping& m = fm.mapping();
    QCOMPARE(m.rows.size(), size_t(16));
    QVERIFY(m.notes.join(QLatin1Char(' ')).contains(QLatin1String("over 2 ranks")));
    QCOMPARE(m.rows[0].fqn, QStringLiteral("out.weight"));
    QCOMPARE(m.rows[0].flatParam, 0);
    QCOMPARE(m.rows[0].flatOffset, 0);
    QCOMPARE(m.rows[0].numel, 12);
    QCOMPARE(m.rows[1].fqn, QStringLiteral("out.bias"));
    QCOMPARE(m.rows[1].flatOffset, 12);
    QCOMPARE(m.rows[2].fqn, QStringLiteral("blocks.0.qkv.weight"));
    QCOMPARE(m.rows[2].flatParam, 1);
    QCOMPARE(m.rows[2].flatUnit, QStringLiteral("blocks.0"));
    QCOMPARE(m.rows[3].fqn, QStringLiteral("blocks.0.qkv.bias"));
    QCOMPARE(m.rows[3].flatOffset, 42);
    QCOMPARE(m.rows[3].shape, (std::vector<int64_t> {7}));
    QCOMPARE(m.rows[9].fqn, QStringLiteral("blocks.1.qkv.weight"));
    QCOMPARE(m.rows[9].flatParam, 2);
    // rank 0 holds the first 60 of 119 elements of blocks.0: qkv.weight entirely, proj.weight partly
    QVERIFY(m.rows[2].note.contains(QLatin1String("this file holds [0, 41]")));
    QCOMPARE(fm.index(2, FqnMappingModel::FlatParamColumn).data().toString(), QStringLiteral("1 (blocks.0)"));
    // explicit units and world size give the same answer; a wrong world size finds no layout
    FqnMapping::Options options;
    options.units = {QStringLiteral("blocks.0"), QStringLiteral("blocks.1")};
    options.worldSize = 2;
    QCOMPARE(FqnMapping::build(*rank0, findOptimizers(*rank0), model.get(), options).rows.size(), size_t(16));
    options.worldSize = 3;
    QCOMPARE(FqnMapping::build(*rank0, findOptimizers(*rank0), model.get(), options).rows.size(), size_t(3));
    // without a model: three unnamed flat parameters and a hint
    const FqnMapping alone = FqnMapping::build(*rank0, findOptimizers(*rank0), nullptr, {});
    QCOMPARE(alone.rows.size(), size_t(3));
    QVERIFY(alone.notes.join(QLatin1Char(' ')).contains(QLatin1String("FSDP1")));
}

void TestModels::fqnNormalize()
{
    QCOMPARE(FqnMapping::normalize(QStringLiteral("module._orig_mod.layers.0._fsdp_wrapped_module.attn.weight")),
        QStringLiteral("layers.0.attn.weight"));
    QCOMPARE(FqnMapping::normalize(QStringLiteral("layers.0._checkpoint_wrapped_module.mlp.up.weight")),
        QStringLiteral("layers.0.mlp.up.weight"));
    // "module" is only DDP's prefix at the front
    QCOMPARE(FqnMapping::normalize(QStringLiteral("encoder.module.weight")), QStringLiteral("encoder.module.weight"));
}

void TestModels::diffModel()
{
    const CheckpointPtr a = open("adam_int.pt");
    const CheckpointPtr b = open("adam_step_mismatch.pt");
    DiffModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    DiffOptions options;
    options.histogramBins = 16;
    // rows as the comparison finishes them (the panel appends them from onEntry), then the report in its order
    std::vector<DiffEntry> streamed;
    std::mutex streamedMutex;
    options.onEntry = [&](const DiffEntry& e) {
        std::lock_guard<std::mutex> lock(streamedMutex);
        streamed.push_back(e);
    };
    const DiffReport report = diffCheckpoints(*a, *b, options);
    model.appendEntries({streamed.begin(), streamed.begin() + 10});
    QCOMPARE(model.rowCount(), 10);
    model.appendEntries({streamed.begin() + 10, streamed.end()});
    QCOMPARE(model.rowCount(), 27);
    model.setData(report);
    QCOMPARE(model.rowCount(), 27);
    StatusFilterProxy proxy(DiffModel::StatusRole);
    QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&model);
    proxy.setSortRole(DiffModel::SortRole);
    proxy.setRequiredStatus(QStringLiteral("changed"));
    QCOMPARE(proxy.rowCount(), 9);
    proxy.setRequiredStatus(QStringLiteral("only_b"));
    QCOMPARE(proxy.rowCount(), 4);
    QCOMPARE(proxy.index(0, DiffModel::StatusColumn).data().toString(), QStringLiteral("only in B"));
    proxy.setRequiredStatus(QString());
    proxy.sort(DiffModel::MaxAbsColumn, Qt::DescendingOrder);
    // the steps differ by one (2 vs 1), more than any moment: still ranked after every tensor, apart from them
    QCOMPARE(proxy.index(0, DiffModel::KeyColumn).data().toString(), QStringLiteral("state.0.exp_avg"));
    QCOMPARE(proxy.index(0, DiffModel::NumDiffColumn).data().toString(), QStringLiteral("30"));
    int lastTensor = -1, firstCounter = -1;
    for (int r = 0; r < proxy.rowCount(); ++r) {
        const auto& e
            = model.report().entries[static_cast<size_t>(proxy.index(r, 0).data(DiffModel::EntryIndexRole).toInt())];
        if (e.tensor && e.valuesCompared && e.numel > 1) lastTensor = r;
        if (firstCounter < 0 && e.tensor && e.valuesCompared && e.numel <= 1) firstCounter = r;
    }
    QVERIFY(firstCounter > lastTensor);
    QCOMPARE(proxy.index(firstCounter, DiffModel::KeyColumn).data().toString(), QStringLiteral("state.3.step"));
    QCOMPARE(proxy.index(firstCounter, DiffModel::MaxAbsColumn).data().toString(), QStringLiteral("1"));
    // the first click on a number column sorts it largest first (QHeaderView asks InitialSortOrderRole)
    QCOMPARE(model.headerData(DiffModel::MaxAbsColumn, Qt::Horizontal, Qt::InitialSortOrderRole).toInt(),
        int(Qt::DescendingOrder));
    QCOMPARE(model.headerData(DiffModel::KeyColumn, Qt::Horizontal, Qt::InitialSortOrderRole).toInt(),
        int(Qt::AscendingOrder));
    proxy.setFilterFixedString(QStringLiteral("exp_avg_sq"));
    QCOMPARE(proxy.rowCount(), 4);
    proxy.setFilterFixedString(QString());
    proxy.setKeyFilter(QStringLiteral("state.[01].exp_avg*"));
    QCOMPARE(proxy.rowCount(), 4);
    proxy.setKeyFilter(QStringLiteral("state.[01].exp_avg* -sq"));
    QCOMPARE(proxy.rowCount(), 2);
}

void TestModels::diagnosisModel()
{
    const CheckpointPtr cp = open("adam_step_mismatch.pt");
    DiagnosisModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setData(diagnoseCheckpoint(*cp, nullptr));
    QCOMPARE(model.rowCount(), 2);
    QStringList codes;
    for (int r = 0; r < model.rowCount(); ++r)
        codes << model.index(r, DiagnosisModel::CodeColumn).data().toString();
    codes.sort();
    QCOMPARE(codes, (QStringList {QStringLiteral("id-keyed"), QStringLiteral("step-inconsistent")}));
    QVERIFY(!model.index(0, DiagnosisModel::SeverityColumn).data(Qt::DecorationRole).isNull());
}

void TestModels::diagnosisModelGroupsAlikeFindings()
{
    // 1,024 ranks' unreadable files were 1,024 rows: findings alike (code, loader error, fix) are one row naming the
    // ranks, its children each finding; a different one stays its own row
    Diagnosis d;
    for (int r = 0; r < 1024; ++r) {
        Finding f(FindingCode::UnreadableChunk,
            "rank " + std::to_string(r) + ": __" + std::to_string(r)
                + "_0.distcp: "
                  "cannot be read",
            "model.w");
        f.ranks = {r};
        f.fix = "copy the rank's file again";
        d.findings.push_back(std::move(f));
    }
    d.findings.emplace_back(FindingCode::ChunkGap, "a gap", "model.b");
    DiagnosisModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setData(d);
    QCOMPARE(model.rowCount(), 2);
    const QModelIndex group = model.index(0, DiagnosisModel::CodeColumn);
    QCOMPARE(group.data().toString(), QStringLiteral("unreadable-chunk ×1,024"));
    QCOMPARE(model.findingCount(group), 1024);
    QCOMPARE(model.rowCount(model.index(0, 0)), 1024);
    QVERIFY2(model.index(0, DiagnosisModel::MessageColumn).data().toString().contains(QStringLiteral("r0-1023")),
        qPrintable(model.index(0, DiagnosisModel::MessageColumn).data().toString()));
    const QModelIndex member = model.index(17, DiagnosisModel::MessageColumn, model.index(0, 0));
    QVERIFY(member.data().toString().startsWith(QStringLiteral("rank 17:")));
    QCOMPARE(member.parent().row(), 0);
    QCOMPARE(model.finding(member)->ranks, std::vector<int> {17});
    QCOMPARE(model.index(1, DiagnosisModel::CodeColumn).data().toString(), QStringLiteral("chunk-gap"));
    QCOMPARE(model.rowCount(model.index(1, 0)), 0);
    // three alike are still listed one by one
    d.findings.erase(d.findings.begin() + 3, d.findings.begin() + 1024);
    model.setData(d);
    QCOMPARE(model.rowCount(), 4);
}

void TestModels::verifyModel()
{
    const CheckpointPtr cp = open("fsdp2_r3");
    VerifyModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    VerifyOptions options;
    options.worldSize = 2;
    model.setData(verifyByLoad(*cp, options));
    QVERIFY(model.report().identical());
    QCOMPARE(model.rowCount(), static_cast<int>(cp->entries.size()));
    int tensorRow = -1;
    for (int r = 0; r < model.rowCount() && tensorRow < 0; ++r)
        if (model.index(r, 0).data().toString() == QLatin1String("optim.state.blocks.0.qkv.weight.exp_avg"))
            tensorRow = r;
    QVERIFY(tensorRow >= 0);
    const QModelIndex key = model.index(tensorRow, 0);
    QCOMPARE(model.rowCount(key), 2); // two ranks in the target layout
    QCOMPARE(model.index(0, VerifyModel::KeyColumn, key).data().toString(), QStringLiteral("rank 0"));
    QCOMPARE(model.index(0, VerifyModel::ElementsColumn, key).data().toString(), QStringLiteral("24"));
    QCOMPARE(model.index(1, VerifyModel::ElementsColumn, key).data().toString(), QStringLiteral("18"));
    QCOMPARE(model.index(tensorRow, VerifyModel::StatusColumn).data().toString(), QStringLiteral("identical"));
    visitAll(&model);
    StatusFilterProxy proxy(VerifyModel::StatusRole);
    QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&model);
    proxy.setExcludedStatus(QStringLiteral("identical"));
    QCOMPARE(proxy.rowCount(), 0);
}

void TestModels::format()
{
    QCOMPARE(Format::bytes(3104), QStringLiteral("3.0 KiB"));
    QCOMPARE(Format::bytes(512), QStringLiteral("512 B"));
    QCOMPARE(Format::count(1234567), QStringLiteral("1,234,567"));
    QCOMPARE(Format::ranks({0, 1, 2}), QStringLiteral("r0-2"));
    QCOMPARE(Format::ranks({0, 2}), QStringLiteral("r0, r2"));
    QCOMPARE(Format::box({2, 0}, {2, 5}), QStringLiteral("[2:4, 0:5]"));
    QCOMPARE(Format::number(1e-9), QStringLiteral("1.00000e-09"));
    QCOMPARE(Format::elements(1), QStringLiteral("1 element"));
    QCOMPARE(Format::elements(0), QStringLiteral("0 elements"));
    QCOMPARE(Format::elements(1234), QStringLiteral("1,234 elements"));
    // two checkpoints both named ckpt: their parent folders tell them apart, as few as it takes
    using Names = std::pair<QString, QString>;
    QCOMPARE(Format::distinctNames(QStringLiteral("/runs/a/step_100/ckpt"), QStringLiteral("/runs/a/step_200/ckpt")),
        Names(QStringLiteral("step_100/ckpt"), QStringLiteral("step_200/ckpt")));
    QCOMPARE(Format::distinctNames(QStringLiteral("/x/run1/s/ckpt/"), QStringLiteral("/y/run2/s/ckpt")),
        Names(QStringLiteral("run1/s/ckpt"), QStringLiteral("run2/s/ckpt")));
    QCOMPARE(Format::distinctNames(QStringLiteral("/d/a.pt"), QStringLiteral("/d/b.pt")),
        Names(QStringLiteral("a.pt"), QStringLiteral("b.pt")));
    QCOMPARE(Format::distinctNames(QStringLiteral("/d/a.pt"), QStringLiteral("/d/a.pt")),
        Names(QStringLiteral("a.pt"), QStringLiteral("a.pt")));
    QCOMPARE(Format::distinctNames(QStringLiteral("ckpt"), QStringLiteral("/abs/ckpt")),
        Names(QStringLiteral("ckpt"), QStringLiteral("abs/ckpt")));
    // paths as the user would write them: relative under the working folder, ~ under home (screenshots and status
    // bars without the machine's absolute paths)
    const QString cwd = QDir::currentPath();
    QCOMPARE(Format::displayPath(cwd + QStringLiteral("/runs/step_100")), QStringLiteral("runs/step_100"));
    // URLs: opened as they are, shown without a presigned query (a credential)
    QCOMPARE(Format::location(QStringLiteral("s3://bucket/run/step_100")), QStringLiteral("s3://bucket/run/step_100"));
    QCOMPARE(Format::location(QStringLiteral("runs/step_100")), cwd + QStringLiteral("/runs/step_100"));
    QCOMPARE(Format::displayPath(QStringLiteral("https://host/m.safetensors?X-Amz-Signature=abc")),
        QStringLiteral("https://host/m.safetensors"));
    QCOMPARE(Format::displayPath(QStringLiteral("/definitely/elsewhere/ckpt")),
        QStringLiteral("/definitely/elsewhere/ckpt"));
    if (!QDir::homePath().isEmpty() && QDir::homePath() != QStringLiteral("/") && !cwd.startsWith(QDir::homePath()))
        QCOMPARE(Format::displayPath(QDir::homePath() + QStringLiteral("/ckpt")), QStringLiteral("~/ckpt"));
    QCOMPARE(
        Format::withDisplayPaths("saved in " + QString(cwd + QStringLiteral("/a/b.pt")).toStdString() + " ('model')"),
        QStringLiteral("saved in a/b.pt ('model')"));
}

OPTSCOPE_GUI_TEST_MAIN(TestModels)
#include "test_models.moc"
