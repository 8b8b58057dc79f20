// SPDX-License-Identifier: GPL-3.0-or-later
// User flows through the main window on real fixtures: open -> select -> statistics, diff, diagnose + fix,
// reshard + verify, FQN jump, drag and drop, layout persistence; and the job runner's supersede/cancel contract.
#include "guitest.h"

#include "common/format.h"
#include "common/warning.h"
#include "mainwindow.h"
#include "models/chunklistmodel.h"
#include "models/diagnosismodel.h"
#include "models/diffmodel.h"
#include "models/fqnmappingmodel.h"
#include "models/paramgroupsmodel.h"
#include "models/statekeysmodel.h"
#include "models/statusfilterproxy.h"
#include "models/tensorstatsmodel.h"
#include "models/valuecomparemodel.h"
#include "models/valuespreviewmodel.h"
#include "models/verifymodel.h"
#include "panels/diagnosepanel.h"
#include "panels/diffpanel.h"
#include "panels/fqnmappingpanel.h"
#include "panels/reshardpanel.h"
#include "panels/shardlayoutpanel.h"
#include "panels/statekeyspanel.h"
#include "panels/tensordetailspanel.h"
#include "panels/watchpanel.h"
#include "plots/diffheatmap.h"
#include "plots/histogramplot.h"
#include "plots/plotexport.h"
#include "plots/qcp.h"
#include "plots/shardlayoutwidget.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"
#include "session/keytree.h"

#include "optscope/analysis/diff_report.h"
#include "optscope/base/error.h"
#include "optscope/base/progress.h"
#include "optscope/formats/checkpoint_loader.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <QAbstractItemModelTester>
#include <QAction>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHeaderView>
#include <QIcon>
#include <QImage>
#include <QInputDialog>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QMimeData>
#include <QProcess>
#include <QPushButton>
#include <QScreen>
#include <QScrollBar>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <QToolButton>
#include <QTreeView>
#include <QUrl>

#include <atomic>
#include <cmath>
#include <memory>
#include <set>

using namespace optscope;
using namespace optscope::ui;

namespace {

constexpr int Timeout = 60000;

/// the window on screen at @p size, its layout not saved
bool showAt(MainWindow& w, const QSize& size)
{
    w.setPersistLayout(false);
    w.resize(size);
    w.show();
    return QTest::qWaitForWindowExposed(&w);
}

bool openAndWait(MainWindow& w, const QString& path)
{
    QSignalSpy loaded(w.context(), &CheckpointContext::checkpointChanged);
    w.openPath(path);
    return loaded.wait(Timeout) && w.context()->checkpoint() != nullptr;
}

/// nginx (the server the remote-storage tests use: a real program) serving @p root over HTTP on a free port of
/// 127.0.0.1, its configuration and logs in @p confDir; returns the port, or 0 when nginx is not installed
quint16 startNginx(QProcess& nginx, const QString& root, const QString& confDir)
{
    QString exe = QStandardPaths::findExecutable(QStringLiteral("nginx"));
    if (exe.isEmpty() && QFileInfo::exists(QStringLiteral("/usr/sbin/nginx"))) exe = QStringLiteral("/usr/sbin/nginx");
    if (exe.isEmpty()) return 0;
    const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
        || ::getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        ::close(probe);
        return 0;
    }
    const quint16 port = ntohs(a.sin_port);
    ::close(probe);
    QFile conf(confDir + QStringLiteral("/nginx.conf"));
    if (!conf.open(QIODevice::WriteOnly)) return 0;
    QString temps;
    for (const char* k : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
        temps += QStringLiteral(" %1_temp_path %2/%1;").arg(QLatin1String(k), confDir);
    conf.write(QStringLiteral("daemon off; pid %1/nginx.pid; error_log %1/error.log;\nevents {}\n"
                              "http { access_log off;%2 server { listen 127.0.0.1:%3; root %4; } }\n")
                   .arg(confDir, temps)
                   .arg(port)
                   .arg(root)
                   .toUtf8());
    conf.close();
    nginx.start(exe, {QStringLiteral("-c"), conf.fileName(), QStringLiteral("-p"), confDir});
    for (int i = 0; i < 200; ++i) { // listening within 10 s
        const int s = ::socket(AF_INET, SOCK_STREAM, 0);
        a.sin_port = htons(port);
        const bool up = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        ::close(s);
        if (up) return port;
        if (nginx.state() == QProcess::NotRunning) return 0;
        QTest::qWait(50);
    }
    return 0;
}

/// nginx serving @p root while it lives (startNginx), stopped when it goes, also when a test fails midway; port 0 when
/// nginx is not installed
struct ServedFolder
{
    explicit ServedFolder(const QString& root)
        : port(startNginx(nginx, root, conf.path()))
    { }
    ~ServedFolder()
    {
        nginx.terminate();
        nginx.waitForFinished(5000);
    }
    QTemporaryDir conf;
    QProcess nginx;
    quint16 port;
};

/// answers the modal dialogs that open while it lives: an input dialog gets the next of @p texts and is accepted, a
/// message box's text is kept in said() and it is closed
class DialogAnswerer
{
public:
    explicit DialogAnswerer(QStringList texts)
        : m_texts(std::move(texts))
    {
        QObject::connect(&m_timer, &QTimer::timeout, [this] {
            QWidget* modal = QApplication::activeModalWidget();
            if (auto* input = qobject_cast<QInputDialog*>(modal)) {
                input->setTextValue(m_texts.isEmpty() ? QString() : m_texts.takeFirst());
                input->accept();
            } else if (auto* box = qobject_cast<QMessageBox*>(modal)) {
                m_said << box->text();
                box->accept();
            }
        });
        m_timer.start(20);
    }
    const QStringList& said() const { return m_said; }

private:
    QStringList m_texts, m_said;
    QTimer m_timer;
};

QString readFile(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return QString::fromUtf8(f.readAll());
}

} // namespace

class TestFlows : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void openSelectStatistics();
    void selectingQuicklySupersedes();
    void innerNodesAndValues();
    void diffEqualCheckpoints();
    void diffChangedCheckpoints();
    void anotherCheckpointStartsClean();
    void diffRanks();
    void diagnoseFindings();
    void diagnoseApplyFixAndSave();
    void diagnoseTargetOptimizerAndLoadPaths();
    void gettingStartedNamesRealMenus();
    void reshardAndVerify();
    void fqnMappingJumpsToState();
    void dragAndDropOpensFolder();
    void openFailureIsReported();
    void openUrlReadsInPlace();
    void remoteScalarsAreReadOffTheUiThread();
    void compareWithUrlMatchesTheLocalCompare();
    void treeFillsWhileLoading();
    void cancelledLoadGivesTheTreeBack();
    void warningsShowTextAsPlainText();
    void openFileRawShowsWhatTheFileHolds();
    void stateKeysNamesStayWhileScrollingRight();
    void fileChangedWhileOpen();
    void layoutAndRecentFilesPersist();
    void jobRunnerSupersedesAndCancels();
    void jobRunnerThrottlesProgress();
    void keyNamesReadableAt1280x720();
    void copyFullKeyAndContextMenus();
    void scalarsShownAsValues();
    void unsafeGlobalsBannerAndRows();
    void paramGroupsTable();
    void diffFollowsThroughAndModes();
    void diffRankModeKeepsTheCheckpointDiff();
    void plotsSaveAsImages();
    void filterSyntaxAndValuePredicates();
    void reshardPreviewOpenAndDialogs();
    void heatmapPerKindLabelsAndTooltips();
    void diffValuesSideBySide();
    void diffDirectionFollowsTraining();
    void diffValuesPageThroughLargeTensors();
    void shardLayoutRoomAndLanes();
    void filterOpensItsMatches();
    void fqnConfidenceInSight();
    void commandLineRequestsApply();
    void watchFolderFollowsARun();
    void diagnoseNamesDeepSpeedAsTheLoader();
    void windowNeverGrowsPastTheScreen();
};

void TestFlows::init()
{
    QSettings().clear();
}

void TestFlows::openSelectStatistics()
{
    MainWindow w;
    w.setPersistLayout(false);
    w.show();
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    QCOMPARE(w.windowTitle(), QStringLiteral("fsdp2_r3 — OptScope"));
    TensorDetailsPanel* details = w.tensorDetailsPanel();
    QSignalSpy stats(details, &TensorDetailsPanel::statsReady);
    QSignalSpy preview(details, &TensorDetailsPanel::previewReady);
    w.context()->select(QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg"));
    QVERIFY(stats.wait(Timeout));
    // the values PyTorch computes for the gathered tensor
    const auto& s = details->statsModel()->stats();
    QVERIFY(s.has_value());
    QCOMPARE(s->numel, 42);
    QCOMPARE(s->min, -0.35204219818115234);
    QCOMPARE(s->max, 0.15582334995269775);
    QVERIFY(std::abs(s->mean - -0.05488828943288397) < 1e-12);
    QVERIFY(std::abs(s->std - 0.11267490445591472) < 1e-12);
    QVERIFY(std::abs(s->l2Norm - 0.8043975504491467) < 1e-12);
    QCOMPARE(details->histogram()->binCount(), TensorDetailsPanel::HistogramBins);
    QCOMPARE(details->histogram()->totalCount(), 42);
    details->logScale()->setChecked(true);
    QVERIFY(details->histogram()->logScale());
    // the preview: all 7 rows of 6, the chunk list: one chunk per rank
    if (details->previewModel()->rowCount() == 0) QVERIFY(preview.wait(Timeout));
    QCOMPARE(details->previewModel()->rowCount(), 7);
    QCOMPARE(details->previewModel()->columnCount(), 6);
    QCOMPARE(details->chunkModel()->rowCount(), 3);
    // the State keys view follows the selection
    QCOMPARE(w.stateKeysPanel()->view()->currentIndex().data(StateKeysModel::KeyRole).toString(),
        QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg"));
    // a row offset reads another window
    preview.clear();
    details->rowOffset()->setValue(5);
    QVERIFY(preview.wait(Timeout));
    QCOMPARE(details->previewModel()->slice().rowOffset, 5);
    QCOMPARE(details->previewModel()->rowCount(), 2);
    // the shard layout: three lanes, rows 3/3/1 of 7 with FSDP's ceil(7/3) = 3 rows per rank: rank 2 pads 2
    ShardLayoutWidget* lanes = w.shardLayoutPanel()->layoutWidget();
    QCOMPARE(lanes->laneCount(), 3);
    QCOMPARE(lanes->paddingRows(0), 0);
    QCOMPARE(lanes->paddingRows(2), 2);
    QVERIFY(w.shardLayoutPanel()->summaryText().contains(QLatin1String("tile the tensor exactly")));
    QVERIFY(lanes->toolTipAt(QPoint(lanes->width() / 10 + 100, lanes->height() / 2)).contains(QLatin1String("rank")));
    // zoom and pan change the view, double-click resets it
    const double span = lanes->viewEnd() - lanes->viewStart();
    QWheelEvent wheel(QPointF(lanes->width() / 2.0, lanes->height() / 2.0), lanes->mapToGlobal(QPointF(10, 10)),
        QPoint(), QPoint(0, 240), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(lanes, &wheel);
    QVERIFY(lanes->viewEnd() - lanes->viewStart() < span);
    lanes->resetView();
    QCOMPARE(lanes->viewEnd() - lanes->viewStart(), span);
    // counts are whole: no 0.5 ticks on the histogram of a 7-element tensor (counts of 1 or 2)
    details->logScale()->setChecked(false);
    stats.clear();
    w.context()->select(QStringLiteral("model.blocks.0.qkv.bias"));
    QVERIFY(stats.wait(Timeout));
    details->histogram()->replot();
    QVERIFY(details->histogram()->yAxis->tickVector().size() >= 2);
    for (const double tick : details->histogram()->yAxis->tickVector())
        QCOMPARE(tick, std::round(tick));
}

void TestFlows::selectingQuicklySupersedes()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    TensorDetailsPanel* details = w.tensorDetailsPanel();
    QSignalSpy stats(details, &TensorDetailsPanel::statsReady);
    w.context()->select(QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg"));
    w.context()->select(QStringLiteral("optim.state.blocks.0.head.weight.exp_avg_sq"));
    QVERIFY(stats.wait(Timeout));
    QTRY_VERIFY_WITH_TIMEOUT(w.context()->runner()->isIdle(), Timeout);
    QCOMPARE(stats.count(), 1); // the first selection's statistics were dropped
    const auto& s = details->statsModel()->stats();
    QCOMPARE(s->numel, 20);
    QVERIFY(std::abs(s->mean - 0.002214645390631631) < 1e-12);
}

void TestFlows::innerNodesAndValues()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("dtypes.pt")));
    w.context()->select(QStringLiteral("dtypes"));
    QVERIFY(w.context()->selectedEntry() == nullptr);
    QVERIFY(!w.tensorDetailsPanel()->statsModel()->stats().has_value());
    QCOMPARE(w.tensorDetailsPanel()->chunkModel()->rowCount(), 0);
    w.context()->select(QStringLiteral("values.tuple"));
    QVERIFY(w.context()->selectedEntry() != nullptr);
    QVERIFY(!w.context()->selectedEntry()->isTensor());
    // a filter in State keys
    w.stateKeysPanel()->filterEdit()->setText(QStringLiteral("float8"));
    QTRY_COMPARE(w.stateKeysPanel()->model()->matchingLeaves(), 4); // e5m2, e4m3fn and their fnuz variants
}

void TestFlows::anotherCheckpointStartsClean()
{
    // a filter and a comparison belong to the checkpoint they were made on: the next file of the same folder keeps
    // the filter (a run's next step), a checkpoint elsewhere (a Hugging Face folder) starts unfiltered, and no A | B
    // | Δ values of the last comparison stay
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("adam_int.pt")));
    QSignalSpy done(w.diffPanel(), &DiffPanel::finished);
    w.diffPanel()->compareWith(testData("adam_step_mismatch.pt"));
    QVERIFY(done.wait(Timeout));
    QTRY_VERIFY_WITH_TIMEOUT(w.diffPanel()->valuesModel()->rowCount() > 0, Timeout);
    w.stateKeysPanel()->filterEdit()->setText(QStringLiteral("exp_avg"));
    QTRY_VERIFY(w.stateKeysPanel()->model()->matchingLeaves() > 0);
    QVERIFY(openAndWait(w, testData("adam_fp16.pt")));
    QCOMPARE(w.stateKeysPanel()->filterEdit()->text(), QStringLiteral("exp_avg"));
    QCOMPARE(w.diffPanel()->valuesModel()->rowCount(), 0);
    QVERIFY(w.diffPanel()->valuesInfo().isEmpty());
    QVERIFY(openAndWait(w, testData("hf/checkpoint-3")));
    QVERIFY(w.stateKeysPanel()->filterEdit()->text().isEmpty());
    QVERIFY(w.stateKeysPanel()->model()->filter().isEmpty());
}

void TestFlows::diffEqualCheckpoints()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("adam_int.pt")));
    QSignalSpy done(w.diffPanel(), &DiffPanel::finished);
    w.diffPanel()->compareWith(testData("adam_int_proto4.pt"));
    QVERIFY(done.wait(Timeout));
    QVERIFY(done.first().first().toBool());
    const DiffReport& r = w.diffPanel()->model()->report();
    QVERIFY(r.equal);
    QCOMPARE(r.entries.size(), size_t(23));
    QCOMPARE(r.count(DiffStatus::Equal), size_t(23));
    QVERIFY(w.diffPanel()->summaryText().contains(QLatin1String("EQUAL")));
    QVERIFY(w.diffPanel()->stepChange().isEmpty()); // same steps: no step headline
    QVERIFY(!w.diffPanel()->heatmap()->keys().isEmpty());
    for (int k = 0; k < w.diffPanel()->heatmap()->keys().size(); ++k)
        QVERIFY(std::isnan(w.diffPanel()->heatmap()->cell(k, 0)));
}

void TestFlows::diffChangedCheckpoints()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("adam_int.pt")));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("adam_step_mismatch.pt"));
    QVERIFY(done.wait(Timeout));
    const DiffReport& r = diff->model()->report();
    QVERIFY(!r.equal);
    QCOMPARE(r.count(DiffStatus::Equal), size_t(14));
    QCOMPARE(r.count(DiffStatus::Changed), size_t(9));
    QCOMPARE(r.count(DiffStatus::OnlyB), size_t(4));
    QVERIFY(diff->summaryText().contains(QLatin1String("DIFFERENT")));
    // sorted by max |Δ|, counters (the step, Δ = 1) after the tensors; the current row is the most different tensor
    QCOMPARE(diff->proxy()->index(0, DiffModel::KeyColumn).data().toString(), QStringLiteral("state.0.exp_avg"));
    QCOMPARE(diff->view()
                 ->currentIndex()
                 .sibling(diff->view()->currentIndex().row(), DiffModel::KeyColumn)
                 .data()
                 .toString(),
        QStringLiteral("state.0.exp_avg"));
    // the histogram of the selected pair, read when it is shown (the report carries none: 100k keys would carry
    // 100k), equal to the core's for the 30 differing elements
    QVERIFY(r.entries.front().histogramCounts.empty());
    QTRY_COMPARE_WITH_TIMEOUT(diff->histogram()->binCount(), DiffPanel::HistogramBins, Timeout);
    auto histogramTotal = [&](const char* key) {
        const auto a = openCheckpoint(testData("adam_int.pt").toStdString());
        const auto b = openCheckpoint(testData("adam_step_mismatch.pt").toStdString());
        int64_t n = 0;
        for (const auto& e : r.entries)
            if (e.key() == key)
                for (auto c : diffHistogram(*a, *b, e, DiffPanel::HistogramBins).counts)
                    n += c;
        return n;
    };
    QTRY_COMPARE_WITH_TIMEOUT(diff->histogram()->totalCount(), histogramTotal("state.0.exp_avg"), Timeout);
    QVERIFY(diff->histogram()->totalCount() >= 29);
    // the heatmap: the largest differences first, exp_avg of parameter 0 at 0.3015...
    const int row = diff->heatmap()->keys().indexOf(QStringLiteral("state.0.exp_avg"));
    QVERIFY(row >= 0);
    QVERIFY(std::abs(diff->heatmap()->cell(row, 0) - 0.30154550075531006) < 1e-9);
    diff->showKey(QStringLiteral("state.1.exp_avg"));
    QTRY_COMPARE_WITH_TIMEOUT(diff->histogram()->totalCount(), histogramTotal("state.1.exp_avg"), Timeout);
    QVERIFY(diff->histogram()->totalCount() >= 4);
    // export
    QTemporaryDir tmp;
    QVERIFY(diff->exportJson(tmp.filePath(QStringLiteral("diff.json"))).isEmpty());
    const QJsonObject json
        = QJsonDocument::fromJson(readFile(tmp.filePath(QStringLiteral("diff.json"))).toUtf8()).object();
    QCOMPARE(json.value(QStringLiteral("equal")).toBool(true), false);
    QVERIFY(diff->exportCsv(tmp.filePath(QStringLiteral("diff.csv"))).isEmpty());
    const QString csv = readFile(tmp.filePath(QStringLiteral("diff.csv")));
    QVERIFY(csv.startsWith(QLatin1String("key,key_a,key_b,type,status")));
    QVERIFY(csv.contains(QLatin1String("state.3.step,")));
    // double-click semantics: inspect A's key
    QSignalSpy jump(diff, &DiffPanel::jumpRequested);
    emit diff->view()->doubleClicked(diff->view()->currentIndex());
    QCOMPARE(jump.count(), 1);
    QCOMPARE(w.context()->selectedKey(), QStringLiteral("state.1.exp_avg"));
}

void TestFlows::diffRanks()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    QSignalSpy done(w.diffPanel(), &DiffPanel::finished);
    w.diffPanel()->compareRanks(0, 1);
    QVERIFY(done.wait(Timeout));
    QVERIFY(done.first().first().toBool());
    QVERIFY(w.diffPanel()->model()->rowCount() > 0);
}

void TestFlows::diagnoseFindings()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("adam_step_mismatch.pt")));
    DiagnosePanel* diag = w.diagnosePanel();
    QSignalSpy done(diag, &DiagnosePanel::finished);
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    QCOMPARE(diag->model()->rowCount(), 2); // id-keyed (info), step-inconsistent (warning)
    QVERIFY(!diag->applyButton()->isEnabled());
    // sorted by severity: the warning first, its details shown
    QCOMPARE(
        diag->proxy()->index(0, DiagnosisModel::CodeColumn).data().toString(), QStringLiteral("step-inconsistent"));
    QVERIFY(diag->detailsText().contains(QLatin1String("step-inconsistent")));
    // the id-keyed finding's fix in the app's words: no CLI option (--model), and its key in the tooltip
    diag->view()->setCurrentIndex(diag->proxy()->index(1, 0));
    QVERIFY(diag->detailsText().contains(QLatin1String("id-keyed")));
    QVERIFY2(diag->detailsText().contains(QLatin1String("give the model")), qPrintable(diag->detailsText()));
    QVERIFY2(!diag->detailsText().contains(QLatin1String("--")), qPrintable(diag->detailsText()));
    const QModelIndex keyCell = diag->proxy()->index(1, DiagnosisModel::OptimizerColumn);
    QVERIFY(keyCell.data(Qt::ToolTipRole).toString().contains(keyCell.data().toString()));

    // a reference chosen for one checkpoint does not stay for the next one
    diag->setReference(testData("diag/model.pt"));
    QVERIFY(openAndWait(w, testData("adam_empty_state.pt")));
    QVERIFY(diag->referenceEdit()->text().isEmpty());
    done.clear();
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    QCOMPARE(diag->model()->rowCount(), 1);
    QCOMPARE(diag->model()->index(0, DiagnosisModel::SeverityColumn).data().toString(), QStringLiteral("error"));
    QCOMPARE(diag->model()->index(0, DiagnosisModel::CodeColumn).data().toString(), QStringLiteral("empty-state"));
}

void TestFlows::diagnoseApplyFixAndSave()
{
    // the demo optimizer against the FQNs of the same model under torch.compile: every key lacks '_orig_mod.'
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, QStringLiteral(OPTSCOPE_DEMO_DIR "/checkpoint")));
    DiagnosePanel* diag = w.diagnosePanel();
    const QString fqns = QStringLiteral(OPTSCOPE_DEMO_DIR "/compiled_fqns.txt");
    diag->setReference(fqns);
    QSignalSpy done(diag, &DiagnosePanel::finished);
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    QCOMPARE(diag->model()->rowCount(), 1);
    // the optimizer's plain names are what set_optimizer_state_dict looks up in a compiled model; the model saved
    // beside it is what cannot load into the compiled module
    QCOMPARE(diag->model()->index(0, DiagnosisModel::CodeColumn).data(DiagnosisModel::SortRole).toString(),
        QStringLiteral("model-keys-mismatch"));
    QCOMPARE(diag->model()->index(0, DiagnosisModel::SeverityColumn).data().toString(), QStringLiteral("error"));
    QVERIFY(diag->detailsText().contains(QLatin1String("PyTorch would raise")));
    QVERIFY(diag->applyButton()->isEnabled());
    // its name shows whole, "(fixable)" included (a fixed 170 px cut it)
    const QString name = diag->proxy()->index(0, DiagnosisModel::CodeColumn).data().toString();
    QVERIFY(name.endsWith(QLatin1String("(fixable)")));
    QVERIFY2(
        diag->view()->fontMetrics().horizontalAdvance(name) < diag->view()->columnWidth(DiagnosisModel::CodeColumn),
        qPrintable(name));

    QTemporaryDir tmp;
    const QString out = tmp.filePath(QStringLiteral("fixed"));
    QSignalSpy fixed(diag, &DiagnosePanel::fixFinished);
    diag->applyFixesTo(out);
    QVERIFY(fixed.wait(Timeout));
    QVERIFY2(fixed.first().first().toBool(), qPrintable(diag->summaryText()));
    QVERIFY(QFileInfo::exists(out + QStringLiteral("/.metadata")));
    // Open fixed: the fixed copy is diagnosed against the same reference at once, and the panel says what the fix
    // resolved and that no error is left
    done.clear();
    QVERIFY(!diag->findChild<QPushButton*>(QStringLiteral("openFixed"))->isHidden());
    diag->findChild<QPushButton*>(QStringLiteral("openFixed"))->click();
    QVERIFY(done.wait(Timeout));
    QCOMPARE(w.context()->path(), out);
    QVERIFY(w.context()->checkpoint()->find("model._orig_mod.embed.weight") != nullptr);
    QVERIFY(w.context()->checkpoint()->find("optim.state.embed.weight.exp_avg") != nullptr);
    QVERIFY2(diag->summaryText().contains(QStringLiteral("resolved <i>model-keys-mismatch</i> (1)")),
        qPrintable(diag->summaryText()));
    QVERIFY(diag->summaryText().contains(QStringLiteral("No error is left")));
    for (int r = 0; r < diag->model()->rowCount(); ++r)
        QVERIFY(diag->model()->index(r, DiagnosisModel::SeverityColumn).data().toString() != QLatin1String("error"));
}

void TestFlows::diagnoseTargetOptimizerAndLoadPaths()
{
    // real PyTorch 2.6 files (tests/data/load_cases/two_groups_vs_one, verdicts checked against PyTorch): an
    // optimizer saved with two param groups. Without a target optimizer the loading code is taken to build the same
    // groups (a resume): no error, and the panel says so; with the one-group target the groups error appears
    MainWindow w;
    w.setPersistLayout(false);
    const QString dir = testData("load_cases/two_groups_vs_one/");
    QVERIFY(openAndWait(w, dir + QStringLiteral("optim.pt")));
    DiagnosePanel* diag = w.diagnosePanel();
    diag->setReference(dir + QStringLiteral("model.pt"));
    QSignalSpy done(diag, &DiagnosePanel::finished);
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    auto codes = [&] {
        QStringList c;
        for (int r = 0; r < diag->model()->rowCount(); ++r)
            c << diag->model()->index(r, DiagnosisModel::CodeColumn).data(DiagnosisModel::SortRole).toString();
        return c;
    };
    QVERIFY2(!codes().contains(QStringLiteral("param-groups-mismatch")), qPrintable(codes().join(QLatin1Char(','))));
    // what each load path does, in the CLI's words, and what was assumed
    QVERIFY2(
        diag->summaryText().contains(QLatin1String("what PyTorch 2.6 does with it")), qPrintable(diag->summaryText()));
    QVERIFY(diag->summaryText().contains(QLatin1String("optimizer.load_state_dict")));
    QVERIFY(diag->summaryText().contains(QLatin1String("loads (6 of 6 parameters get state)")));
    QVERIFY(diag->summaryText().contains(QLatin1String("no target optimizer given")));
    // the app's words, not the CLI's options (issue 30 item 8)
    QVERIFY2(!diag->summaryText().contains(QLatin1String("--")), qPrintable(diag->summaryText()));

    diag->setTarget(dir + QStringLiteral("target_optim.pt"));
    done.clear();
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    QVERIFY2(codes().contains(QStringLiteral("param-groups-mismatch")), qPrintable(codes().join(QLatin1Char(','))));
    QVERIFY2(diag->summaryText().contains(QLatin1String("raises ValueError")), qPrintable(diag->summaryText()));
    QVERIFY(!diag->summaryText().contains(QLatin1String("no target optimizer given")));
    // another checkpoint starts without the target
    QVERIFY(openAndWait(w, testData("adamw_fqn.pt")));
    QVERIFY(diag->targetEdit()->text().isEmpty());
}

void TestFlows::gettingStartedNamesRealMenus()
{
    // Help > Getting started walks a new user through the three jobs by the names of menus, panels and buttons:
    // every one it names must exist under that name
    MainWindow w;
    w.setPersistLayout(false);
    const QString text = MainWindow::gettingStartedText();
    QStringList actions;
    for (QAction* a : w.findChildren<QAction*>())
        actions << a->text().remove(QLatin1Char('&'));
    for (QPushButton* b : w.findChildren<QPushButton*>())
        actions << b->text().remove(QLatin1Char('&'));
    for (QToolButton* b : w.findChildren<QToolButton*>())
        actions << b->text().remove(QLatin1Char('&'));
    for (QLabel* l : w.findChildren<QLabel*>())
        actions << l->text().remove(QLatin1Char(':'));
    for (const QString& name : {QStringLiteral("Open File…"), QStringLiteral("Open Folder…"),
             QStringLiteral("Compare with"), QStringLiteral("Watch Folder…"), QStringLiteral("Browse"),
             QStringLiteral("Target optimizer"), QStringLiteral("Apply fix and save as…"), QStringLiteral("Open fixed"),
             QStringLiteral("Verify"), QStringLiteral("Reshard and save…")}) {
        QVERIFY2(text.contains(name), qPrintable(name));
        QVERIFY2(actions.contains(name), qPrintable(name + QStringLiteral(" is not a menu item, button or label")));
    }
    for (const QString& panel : {QStringLiteral("State keys"), QStringLiteral("Diff"), QStringLiteral("Diagnose"),
             QStringLiteral("Reshard and verify"), QStringLiteral("Shard layout")})
        QVERIFY2(text.contains(QStringLiteral("<b>") + panel + QStringLiteral("</b>")), qPrintable(panel));
}

void TestFlows::reshardAndVerify()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    ReshardPanel* panel = w.reshardPanel();
    QCOMPARE(panel->deviceCombo()->itemData(0).toString(), QStringLiteral("cpu"));
    QSignalSpy done(panel, &ReshardPanel::finished);
    // Stop cancels: the job reports back as cancelled, the panel is usable again
    panel->verify();
    QVERIFY(!panel->stopButton()->isHidden());
    QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
    QVERIFY(done.wait(Timeout));
    QCOMPARE(done.first().first().toBool(), false);
    QCOMPARE(panel->summaryText(), QStringLiteral("Cancelled."));
    QVERIFY(panel->stopButton()->isHidden());
    done.clear();
    // FSDP2 layout on 2 ranks: verify-by-load
    panel->worldSize()->setValue(2);
    panel->verify();
    QVERIFY(done.wait(Timeout));
    QVERIFY(done.first().first().toBool());
    const VerifyReport& r = panel->model()->report();
    QVERIFY(r.identical());
    QCOMPARE(r.entries.size(), size_t(75));
    QCOMPARE(r.worldSize, 2);
    QVERIFY(panel->summaryText().contains(QLatin1String("IDENTICAL")));
    // FSDP1 layout on 4 ranks: written and loaded back
    panel->layoutCombo()->setCurrentIndex(panel->layoutCombo()->findData(QStringLiteral("fsdp1")));
    panel->worldSize()->setValue(4);
    done.clear();
    panel->verify();
    QVERIFY(done.wait(Timeout));
    QVERIFY(panel->model()->report().identical());
    QVERIFY(panel->summaryText().contains(QLatin1String("FSDP1")));
    // reshard to a folder: a 4-rank DCP checkpoint that holds the same tensors
    QTemporaryDir tmp;
    const QString out = tmp.filePath(QStringLiteral("r4"));
    done.clear();
    panel->reshardTo(out);
    QVERIFY(done.wait(Timeout));
    QVERIFY(panel->model()->report().identical());
    const CheckpointPtr copy = openCheckpoint(out.toStdString());
    std::set<int> ranks;
    for (const auto& e : copy->entries)
        for (const auto& c : e.tensor->chunks)
            ranks.insert(c.rank);
    QCOMPARE(*ranks.rbegin(), 3);
    // reports
    QVERIFY(panel->exportJson(tmp.filePath(QStringLiteral("v.json"))).isEmpty());
    const QJsonObject json
        = QJsonDocument::fromJson(readFile(tmp.filePath(QStringLiteral("v.json"))).toUtf8()).object();
    QVERIFY(json.value(QStringLiteral("identical")).toBool());
    QVERIFY(panel->exportCsv(tmp.filePath(QStringLiteral("v.csv"))).isEmpty());
    const QStringList lines
        = readFile(tmp.filePath(QStringLiteral("v.csv"))).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.first(), QStringLiteral("key,type,status,rank,elements,differing,first_diff,detail"));
    // FSDP1 on 4 ranks: ceil(7 / 4) = 2 rows each, rank 3 the last row (6 elements)
    QVERIFY(lines.contains(QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg,rank,identical,3,6,0,,")));
}

void TestFlows::fqnMappingJumpsToState()
{
    MainWindow w;
    w.setPersistLayout(false);
    QSignalSpy mapped(w.fqnMappingPanel(), &FqnMappingPanel::mappingReady);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    QVERIFY(mapped.count() > 0 || mapped.wait(Timeout));
    QCOMPARE(w.fqnMappingPanel()->model()->rowCount(), 16);
    // plain names: no Normalised FQN column repeating them; FSDP2 has no flat parameters
    QVERIFY(w.fqnMappingPanel()->view()->isColumnHidden(FqnMappingModel::NormalizedColumn));
    QVERIFY(w.fqnMappingPanel()->view()->isColumnHidden(FqnMappingModel::FlatParamColumn));
    w.fqnMappingPanel()->searchEdit()->setText(QStringLiteral("blocks.1.proj"));
    QCOMPARE(w.fqnMappingPanel()->proxy()->rowCount(), 2);
    QSignalSpy jump(w.fqnMappingPanel(), &FqnMappingPanel::jumpRequested);
    w.fqnMappingPanel()->activateRow(0);
    QCOMPARE(jump.count(), 1);
    QCOMPARE(w.context()->selectedKey(), QStringLiteral("optim.state.blocks.1.proj.weight"));
    QCOMPARE(w.stateKeysPanel()->view()->currentIndex().data(StateKeysModel::KeyRole).toString(),
        QStringLiteral("optim.state.blocks.1.proj.weight"));
    // a reference model names the raw FSDP1 flat parameters
    QVERIFY(openAndWait(w, testData("fsdp1_raw_r2/optim_rank1.pt")));
    mapped.clear();
    w.context()->openReference(testData("fsdp1_r2"));
    QTRY_COMPARE_WITH_TIMEOUT(w.fqnMappingPanel()->model()->rowCount(), 16, Timeout);
    QTRY_VERIFY_WITH_TIMEOUT(!w.fqnMappingPanel()->view()->isColumnHidden(FqnMappingModel::FlatParamColumn), Timeout);
    // torch.compile names: the normalised names say what they match
    QVERIFY(openAndWait(w, testData("compiled.pt")));
    QTRY_VERIFY_WITH_TIMEOUT(w.fqnMappingPanel()->model()->rowCount() > 0, Timeout);
    QTRY_VERIFY_WITH_TIMEOUT(!w.fqnMappingPanel()->view()->isColumnHidden(FqnMappingModel::NormalizedColumn), Timeout);
}

void TestFlows::dragAndDropOpensFolder()
{
    MainWindow w;
    w.setPersistLayout(false);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(testData("fsdp2_r2/.metadata"))});
    QSignalSpy loaded(w.context(), &CheckpointContext::checkpointChanged);
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &drop);
    QVERIFY(loaded.wait(Timeout));
    QCOMPARE(w.context()->path(), QDir(testData("fsdp2_r2")).absolutePath());
}

void TestFlows::openUrlReadsInPlace()
{
    // File > Open URL…: what is not a URL OptScope reads is refused with a warning, nothing opens; a DCP folder served
    // over HTTP (nginx) opens in place with the local copy's keys, and joins the recent list under its URL
    const ServedFolder served(QFileInfo(testData("fsdp2_r2")).absolutePath());
    const quint16 port = served.port;
    if (!port) QSKIP("nginx is not installed (the remote-storage tests' server)");
    MainWindow w; // persisting: the recent list is kept (init() clears the settings)
    auto* openUrl = w.findChild<QAction*>(QStringLiteral("openUrl"));
    QVERIFY(openUrl);
    {
        DialogAnswerer answer({QStringLiteral("ftp://127.0.0.1/fsdp2_r2")});
        openUrl->trigger();
        QVERIFY2(answer.said().size() == 1 && answer.said()[0].contains(QLatin1String("is not a URL OptScope reads")),
            qPrintable(answer.said().join(QLatin1Char('|'))));
    }
    QVERIFY(!w.context()->checkpoint());
    const QString url = QStringLiteral("http://127.0.0.1:%1/fsdp2_r2").arg(port);
    QSignalSpy loaded(w.context(), &CheckpointContext::checkpointChanged);
    {
        DialogAnswerer answer({QStringLiteral("  %1  ").arg(url)}); // pasted with spaces around
        openUrl->trigger();
        QVERIFY2(answer.said().isEmpty(), qPrintable(answer.said().join(QLatin1Char('|'))));
    }
    QVERIFY(loaded.wait(Timeout));
    const CheckpointPtr remote = w.context()->checkpoint();
    QVERIFY(remote);
    QCOMPARE(remote->format, CheckpointFormat::Dcp);
    const CheckpointPtr local = openCheckpoint(testData("fsdp2_r2").toStdString());
    QCOMPARE(remote->entries.size(), local->entries.size());
    for (size_t i = 0; i < local->entries.size(); ++i)
        QCOMPARE(remote->entries[i].key, local->entries[i].key);
    QCOMPARE(w.context()->path(), url);
    QCOMPARE(w.recentFiles().value(0), url);
}

void TestFlows::remoteScalarsAreReadOffTheUiThread()
{
    // a remote checkpoint's one-element tensors (`step`) show their values as a local one's do, but read on the thread
    // pool: a row shows its shape until its value is there (each read is a round trip to the store; read in data()
    // on the UI thread, a tree of many steps froze the window)
    const ServedFolder served(QFileInfo(testData("fsdp2_r3")).absolutePath());
    const quint16 port = served.port;
    if (!port) QSKIP("nginx is not installed (the remote-storage tests' server)");
    const CheckpointPtr remote = openCheckpoint(QStringLiteral("http://127.0.0.1:%1/fsdp2_r3").arg(port).toStdString());
    const CheckpointPtr local = openCheckpoint(testData("fsdp2_r3").toStdString());
    StateKeysModel remoteModel, localModel;
    QAbstractItemModelTester tester(&remoteModel, QAbstractItemModelTester::FailureReportingMode::QtTest);
    remoteModel.setData(remote, KeyTree::build(*remote));
    localModel.setData(local, KeyTree::build(*local));
    for (const char* key : {"optim.state.blocks.0.qkv.weight.step", "optim.state.blocks.1.qkv.bias.step"}) {
        const QModelIndex at = remoteModel.indexForKey(QString::fromLatin1(key));
        const QModelIndex localAt = localModel.indexForKey(QString::fromLatin1(key));
        QVERIFY2(at.isValid() && localAt.isValid(), key);
        const QString value
            = localModel.index(localAt.row(), StateKeysModel::ShapeColumn, localAt.parent()).data().toString();
        const QModelIndex cell = remoteModel.index(at.row(), StateKeysModel::ShapeColumn, at.parent());
        QSignalSpy changed(&remoteModel, &QAbstractItemModel::dataChanged);
        QCOMPARE(cell.data().toString(), Format::shape({})); // not read here
        QVERIFY(value != Format::shape({}));
        QVERIFY(changed.wait(Timeout));
        QCOMPARE(changed.first().at(0).value<QModelIndex>(), cell);
        QCOMPARE(cell.data().toString(), value);
    }
}

void TestFlows::compareWithUrlMatchesTheLocalCompare()
{
    // Compare with… a checkpoint served over HTTP (nginx): the comparison reads it in place and finds what comparing
    // with its local copy finds, entry by entry (one real Adam step apart: steps and moments change)
    const ServedFolder served(QFileInfo(testData("diff/step4.pt")).absolutePath());
    const quint16 port = served.port;
    if (!port) QSKIP("nginx is not installed (the remote-storage tests' server)");
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("diff/step3.pt")));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("diff/step4.pt"));
    QVERIFY(done.wait(Timeout));
    QCOMPARE(done.takeFirst().at(0).toBool(), true);
    const DiffReport local = diff->model()->report();
    QVERIFY(local.count(DiffStatus::Changed) > 0);
    diff->compareWith(QStringLiteral("http://127.0.0.1:%1/step4.pt").arg(port));
    QVERIFY(done.wait(Timeout));
    QCOMPARE(done.takeFirst().at(0).toBool(), true);
    const DiffReport& remote = diff->model()->report();
    QCOMPARE(remote.entries.size(), local.entries.size());
    for (size_t i = 0; i < local.entries.size(); ++i) {
        QCOMPARE(remote.entries[i].key(), local.entries[i].key());
        QCOMPARE(int(remote.entries[i].status), int(local.entries[i].status));
        QCOMPARE(remote.entries[i].maxAbsDiff, local.entries[i].maxAbsDiff);
    }
}

void TestFlows::openFailureIsReported()
{
    MainWindow w;
    w.setPersistLayout(false);
    QSignalSpy failed(w.context(), &CheckpointContext::loadFailed);
    w.openPath(testData("manifest.json"));
    QVERIFY(failed.wait(Timeout));
    QVERIFY(failed.first().at(1).toString().contains(QLatin1String("manifest.json")));
    QVERIFY(!w.context()->checkpoint());
}

void TestFlows::treeFillsWhileLoading()
{
    // a DCP .metadata hands its keys over as it is read: the State keys tree lists them (flat, with dtype and shape)
    // before the checkpoint is complete and says it is still reading; the finished checkpoint's tree replaces them
    MainWindow w;
    w.setPersistLayout(false);
    StateKeysPanel* keys = w.stateKeysPanel();
    int previewRows = -1;
    QString previewSummary, previewType;
    bool previewBeforeLoad = false;
    // connected after the panel: runs once the panel has shown the preview
    connect(w.context(), &CheckpointContext::loadPreview, this, [&](const CheckpointPtr& preview) {
        previewRows = keys->model()->rowCount();
        previewSummary = keys->summaryText();
        previewBeforeLoad = !w.context()->checkpoint() && preview->tensorCount() == preview->entries.size();
        previewType = keys->model()->index(0, StateKeysModel::TypeColumn).data().toString();
    });
    QSignalSpy changed(w.context(), &CheckpointContext::checkpointChanged);
    w.openPath(testData("scale/r16_l1"));
    QVERIFY(changed.wait(Timeout));
    QVERIFY(previewBeforeLoad);
    const CheckpointPtr cp = w.context()->checkpoint();
    QCOMPARE(previewRows, static_cast<int>(cp->tensorCount()));
    QVERIFY2(previewSummary.startsWith(QLatin1String("Reading")), qPrintable(previewSummary));
    QVERIFY2(previewType.contains(QLatin1String("bf16")) || previewType.contains(QLatin1String("float")),
        qPrintable(previewType));
    // the finished tree: model / optim at the top, the summary counts ranks
    QVERIFY(keys->model()->rowCount() < previewRows);
    QVERIFY2(keys->summaryText().contains(QLatin1String("16 rank(s)")), qPrintable(keys->summaryText()));
}

void TestFlows::cancelledLoadGivesTheTreeBack()
{
    // a load cancelled once its first keys are shown (Esc, or Stop): the tree goes back to the checkpoint that stays
    // open and answers clicks again. Before, it kept the cancelled load's keys under "Reading…" for good, its rows
    // ignoring every click (found by a hunt)
    MainWindow w;
    w.setPersistLayout(false);
    StateKeysPanel* keys = w.stateKeysPanel();
    const QString open = testData("adam_int.pt");
    QVERIFY(openAndWait(w, open));
    const int openRows = keys->model()->rowCount();
    int previews = 0;
    connect(w.context(), &CheckpointContext::loadPreview, this, [&] {
        if (++previews == 1) w.context()->runner()->cancelAll();
    });
    QSignalSpy cancelled(w.context(), &CheckpointContext::loadCancelled);
    w.openPath(testData("scale/r16_l1"));
    QVERIFY(cancelled.wait(Timeout));
    QCOMPARE(previews, 1);
    QTest::qWait(200); // anything the load still had queued
    QCOMPARE(w.context()->path(), open);
    QCOMPARE(keys->model()->rowCount(), openRows);
    QVERIFY2(!keys->summaryText().startsWith(QLatin1String("Reading")), qPrintable(keys->summaryText()));
    // the rows answer clicks: the context's selection follows
    const QModelIndex last = keys->model()->index(openRows - 1, 0);
    const QString key = last.data(StateKeysModel::KeyRole).toString();
    QVERIFY(!key.isEmpty());
    keys->view()->setCurrentIndex(last);
    QCOMPARE(w.context()->selectedKey(), key);
    QVERIFY2(w.statusBar()->currentMessage().startsWith(QLatin1String("Stopped opening")),
        qPrintable(w.statusBar()->currentMessage()));
}

void TestFlows::warningsShowTextAsPlainText()
{
    // error texts carry paths, URLs and key names: one that looks like HTML is shown as written, not rendered (before:
    // QMessageBox's Qt::AutoText rendered it)
    Qt::TextFormat format = Qt::AutoText;
    QString text;
    QTimer::singleShot(0, this, [&] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        format = box->textFormat();
        text = box->text();
        box->accept();
    });
    const QString html = QStringLiteral("Cannot open <b>evil</b><img src=x>.pt");
    showWarning(nullptr, QStringLiteral("Cannot open checkpoint"), html);
    QCOMPARE(format, Qt::PlainText);
    QCOMPARE(text, html);
}

void TestFlows::openFileRawShowsWhatTheFileHolds()
{
    // a DeepSpeed rank file opens as the whole ZeRO checkpoint; opened raw (File > Open File Raw, the CLI's
    // inspect --raw) it shows its flat partitions and DeepSpeed objects, and Reload keeps it raw
    const QString rankFile = testData("zero/stage2/ckpt/global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt");
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, rankFile));
    QCOMPARE(w.context()->checkpoint()->format, CheckpointFormat::DeepSpeedZero);
    QVERIFY(!w.context()->isRaw());
    QSignalSpy changed(w.context(), &CheckpointContext::checkpointChanged);
    w.context()->open(rankFile, CheckpointContext::OpenAs::RawFile);
    QVERIFY(changed.wait(Timeout));
    const CheckpointPtr raw = w.context()->checkpoint();
    QCOMPARE(raw->format, CheckpointFormat::TorchSave);
    QVERIFY(w.context()->isRaw());
    bool partitions = false;
    for (const auto& e : raw->entries)
        partitions = partitions || e.key.find("single_partition_of_fp32_groups") != std::string::npos;
    QVERIFY(partitions);
    QVERIFY2(w.windowTitle().contains(QLatin1String("raw")), qPrintable(w.windowTitle()));
    QVERIFY(w.findChild<QAction*>(QStringLiteral("openRaw")));
    // Reload re-reads it raw
    QAction* reload = nullptr;
    for (QAction* a : w.findChildren<QAction*>())
        if (a->shortcut() == QKeySequence(QKeySequence::Refresh)) reload = a;
    QVERIFY(reload);
    reload->trigger();
    QVERIFY(changed.wait(Timeout));
    QCOMPARE(w.context()->checkpoint()->format, CheckpointFormat::TorchSave);
    // the checkpoint again
    QVERIFY(openAndWait(w, rankFile));
    QVERIFY(!w.context()->isRaw());
}

void TestFlows::stateKeysNamesStayWhileScrollingRight()
{
    // a narrow State keys dock: the tree scrolls right to its numbers; the names stay at the left edge (a second
    // tree over the same model and selection, expanded and scrolled with it), and go away when scrolled back
    MainWindow w;
    w.setPersistLayout(false);
    w.resize(1280, 720);
    w.show();
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    QDockWidget* dock = w.dock(QStringLiteral("keys"));
    QVERIFY(dock);
    w.resizeDocks({dock}, {280}, Qt::Horizontal);
    const QString key = QStringLiteral("optim.state.blocks.1.proj.weight.exp_avg_sq");
    w.context()->select(key);
    QTest::qWait(60);
    QTreeView* tree = w.stateKeysPanel()->view();
    auto* frozen = tree->findChild<QTreeView*>(QStringLiteral("frozenTreeColumn"));
    QVERIFY(frozen);
    QVERIFY(!frozen->isVisible()); // not scrolled: the tree's own names are in place
    QScrollBar* h = tree->horizontalScrollBar();
    QVERIFY2(h->maximum() > 0, "the dock is not narrow enough to scroll");
    h->setValue(h->maximum());
    QTest::qWait(30);
    QVERIFY(frozen->isVisible());
    QCOMPARE(frozen->model(), tree->model());
    QCOMPARE(frozen->selectionModel(), tree->selectionModel());
    QVERIFY(frozen->width() <= tree->viewport()->width() * 55 / 100 + 1);
    for (int c = 1; c < tree->model()->columnCount(); ++c)
        QVERIFY(frozen->isColumnHidden(c));
    // the selected leaf is on the same row in both, and expanded there too
    const QModelIndex leaf = w.stateKeysPanel()->model()->indexForKey(key);
    QVERIFY(leaf.isValid());
    QVERIFY(frozen->isExpanded(leaf.parent()));
    QCOMPARE(frozen->visualRect(leaf).top(), tree->visualRect(leaf).top());
    // a click on a name in the overlay selects that key everywhere
    const QModelIndex other = leaf.parent().model()->index(0, 0, leaf.parent());
    QVERIFY(other.isValid() && other != leaf);
    QTest::mouseClick(frozen->viewport(), Qt::LeftButton, {}, frozen->visualRect(other).center());
    QTRY_COMPARE(w.context()->selectedKey(), other.data(StateKeysModel::KeyRole).toString());
    // collapsing in the tree collapses the overlay
    tree->collapse(leaf.parent());
    QVERIFY(!frozen->isExpanded(leaf.parent()));
    h->setValue(0);
    QTest::qWait(20);
    QVERIFY(!frozen->isVisible());
}

void TestFlows::fileChangedWhileOpen()
{
    // a training job rewrites the checkpoint while it is open: the window stays, the job says what happened
    QTemporaryDir tmp;
    const QString path = tmp.filePath(QStringLiteral("ckpt.pt"));
    QVERIFY(QFile::copy(testData("fsdp2_r3_converted.pt"), path));
    auto window = std::make_unique<MainWindow>();
    MainWindow& w = *window;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, path));
    // the last tensor in the file: its bytes lie in the part the truncation removes
    QString last;
    for (const auto& e : w.context()->checkpoint()->entries)
        if (e.isTensor() && e.tensor->numel() > 1) last = QString::fromStdString(e.key);
    QVERIFY(!last.isEmpty());
    QVERIFY(::truncate(path.toLocal8Bit().constData(), QFileInfo(path).size() / 4) == 0);
    TensorDetailsPanel* details = w.tensorDetailsPanel();
    QSignalSpy stats(details, &TensorDetailsPanel::statsReady);
    w.context()->select(last);
    QVERIFY(stats.wait(Timeout));
    QVERIFY2(
        details->statusText().contains(QLatin1String("changed while being read")), qPrintable(details->statusText()));
    // still here: without the SIGBUS guard the process died on the read above
    // the file vanishes: the diff against it says so, and the window stays usable
    QVERIFY(QFile::remove(path));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("fsdp2_r3_converted.pt"));
    QVERIFY(done.wait(Timeout));
    QCOMPARE(done.first().first().toBool(), false);
    // closing the window while a job runs: the job is cancelled, nothing crashes
    w.context()->select(QStringLiteral("model.blocks.0.qkv.weight"));
    window.reset();
}

void TestFlows::layoutAndRecentFilesPersist()
{
    {
        MainWindow w;
        QVERIFY(openAndWait(w, testData("sgd_momentum.pt")));
        QCOMPARE(w.recentFiles().value(0), QFileInfo(testData("sgd_momentum.pt")).absoluteFilePath());
        w.show();
        w.dock(QStringLiteral("diff"))->hide();
        w.close();
    }
    MainWindow again;
    again.restoreLayout();
    again.show();
    QVERIFY(again.dock(QStringLiteral("diff"))->isHidden());
    QVERIFY(!again.dock(QStringLiteral("keys"))->isHidden());
    QCOMPARE(again.recentFiles().size(), 1);
    again.resetLayout();
    QVERIFY(!again.dock(QStringLiteral("diff"))->isHidden());
}

void TestFlows::jobRunnerSupersedesAndCancels()
{
    JobRunner runner;
    QObject context;
    std::atomic<bool> firstSawCancel {false};
    QStringList delivered;
    QStringList failures;
    // a job that runs until cancelled
    runner.run(
        QStringLiteral("work"), QStringLiteral("first"), &context,
        [&](const Progress& p) {
            while (!p.isCancelled())
                QThread::msleep(2);
            firstSawCancel = true;
            p.checkCancelled();
            return QStringLiteral("first");
        },
        [&](QString s) { delivered << s; }, [&](const QString& m, bool) { failures << m; });
    // a second job in the same channel supersedes it
    runner.run(
        QStringLiteral("work"), QStringLiteral("second"), &context,
        [](const Progress&) { return QStringLiteral("second"); }, [&](QString s) { delivered << s; },
        [&](const QString& m, bool) { failures << m; });
    QTRY_VERIFY_WITH_TIMEOUT(runner.isIdle(), Timeout);
    runner.waitForDone();
    QCoreApplication::processEvents();
    QVERIFY(firstSawCancel);
    QCOMPARE(delivered, QStringList {QStringLiteral("second")});
    QVERIFY(failures.isEmpty()); // a superseded job says nothing
    // an explicit cancel reaches the failure handler as "cancelled"
    bool cancelled = false;
    runner.run(
        QStringLiteral("work"), QStringLiteral("third"), &context,
        [](const Progress& p) {
            while (!p.isCancelled())
                QThread::msleep(2);
            p.checkCancelled();
            return 0;
        },
        [&](int) { delivered << QStringLiteral("third"); }, [&](const QString&, bool c) { cancelled = c; });
    QVERIFY(!runner.isIdle());
    runner.cancelAll();
    QTRY_VERIFY_WITH_TIMEOUT(cancelled, Timeout);
    // the job's thread sees its cancel through CancelScope too: what waits on a remote store without the job's
    // Progress (a read stalled on its server) gives up with the job
    std::atomic<bool> scopeSawCancel {false};
    runner.run(
        QStringLiteral("work"), QStringLiteral("fourth"), &context,
        [&](const Progress&) {
            QElapsedTimer waited;
            waited.start();
            while (!CancelScope::cancelled() && waited.elapsed() < 10000)
                QThread::msleep(2);
            scopeSawCancel = CancelScope::cancelled();
            return 0;
        },
        [](int) {});
    QThread::msleep(20);
    runner.cancel(QStringLiteral("work"));
    runner.waitForDone(); // the work's thread has ended
    QVERIFY(scopeSawCancel);
    QVERIFY(!CancelScope::cancelled()); // the UI thread is in no job's scope
    // cancelled after its work is done but before its result was delivered: still "cancelled", neither a result
    // nor an empty error
    int late = 0;
    QString lateMessage = QStringLiteral("unset");
    bool lateCancelled = false;
    runner.run(
        QStringLiteral("late"), QStringLiteral("late"), &context, [](const Progress&) { return 1; },
        [&](int v) { late = v; },
        [&](const QString& m, bool c) {
            lateMessage = m;
            lateCancelled = c;
        });
    runner.waitForDone(); // the work is done, its delivery is queued
    runner.cancel(QStringLiteral("late"));
    QCoreApplication::processEvents();
    QCOMPARE(late, 0);
    QVERIFY(lateCancelled);
    QCOMPARE(lateMessage, QStringLiteral("Cancelled"));
    // errors arrive as messages; a deleted context gets nothing
    QString error;
    runner.run(
        QStringLiteral("err"), QStringLiteral("error"), &context,
        [](const Progress&) -> int { throw Error(ErrorKind::Format, "x.pt", "broken"); }, [](int) {},
        [&](const QString& m, bool) { error = m; });
    QTRY_VERIFY_WITH_TIMEOUT(!error.isEmpty(), Timeout);
    QVERIFY(error.contains(QLatin1String("broken")));
    bool reached = false;
    {
        QObject shortLived;
        runner.run(
            QStringLiteral("gone"), QStringLiteral("gone"), &shortLived,
            [](const Progress&) {
                QThread::msleep(50);
                return 1;
            },
            [&](int) { reached = true; });
    }
    QTRY_VERIFY_WITH_TIMEOUT(runner.isIdle(), Timeout);
    QCoreApplication::processEvents();
    QVERIFY(!reached);
}

void TestFlows::jobRunnerThrottlesProgress()
{
    JobRunner runner;
    QObject context;
    QSignalSpy progress(&runner, &JobRunner::progress);
    bool done = false;
    runner.run(
        QStringLiteral("p"), QStringLiteral("progress"), &context,
        [](const Progress& p) {
            for (int i = 0; i <= 20000; ++i)
                p(i / 20000.0, "step");
            return 0;
        },
        [&](int) { done = true; });
    QTRY_VERIFY_WITH_TIMEOUT(done, Timeout);
    // 20001 reports in a few milliseconds become a handful of signals, the last one complete
    QVERIFY(progress.count() >= 1);
    QVERIFY(progress.count() < 50);
    QCOMPARE(progress.last().at(1).toDouble(), 1.0);
}

void TestFlows::keyNamesReadableAt1280x720()
{
    MainWindow w;
    QVERIFY(showAt(w, QSize(1280, 720)));
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    // the default layout fits: two panels with plots stacked once forced the window to 774 px
    QTest::qWait(20);
    QCOMPARE(w.size(), QSize(1280, 720));
    const QString key = QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg");
    w.context()->select(key);
    QTest::qWait(50); // the column sizer runs after the expansion settles
    QTreeView* tree = w.stateKeysPanel()->view();
    const QModelIndex leaf = w.stateKeysPanel()->model()->indexForKey(key);
    QVERIFY(leaf.isValid());
    // the leaf's name cell (past the indentation) holds its whole name, and its tooltip the full key
    const QRect leafRect = tree->visualRect(leaf);
    QVERIFY2(leafRect.width() >= tree->fontMetrics().horizontalAdvance(QStringLiteral("exp_avg")),
        qPrintable(QStringLiteral("name cell %1 px wide").arg(leafRect.width())));
    const QModelIndex fqn = leaf.parent();
    QVERIFY(
        tree->visualRect(fqn).width() >= tree->fontMetrics().horizontalAdvance(QStringLiteral("blocks.0.qkv.weight")));
    QCOMPARE(leaf.data(Qt::ToolTipRole).toString().section(QLatin1Char('\n'), 0, 0), key);
    // the name column takes the spare width, not the last column
    QVERIFY(tree->columnWidth(StateKeysModel::NameColumn) > tree->columnWidth(StateKeysModel::RanksColumn));

    // Diff at the same size: keys whole, the key column wider than every other one, tooltips
    DiffPanel* diff = w.diffPanel();
    QVERIFY(openAndWait(w, testData("diff/step3.pt")));
    w.raisePanel(QStringLiteral("diff"));
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("diff/step4.pt"));
    QVERIFY(done.wait(Timeout));
    QTest::qWait(50);
    QTableView* table = diff->view();
    QCOMPARE(table->textElideMode(), Qt::ElideLeft);
    QVERIFY(!table->horizontalHeader()->stretchLastSection());
    const int keyWidth = table->columnWidth(DiffModel::KeyColumn);
    for (int c = 0; c < DiffModel::ColumnCount; ++c)
        if (c != DiffModel::KeyColumn)
            QVERIFY2(keyWidth > table->columnWidth(c), qPrintable(QStringLiteral("column %1").arg(c)));
    // the last column is as wide as its content, not the rest of the view
    QVERIFY(table->columnWidth(DiffModel::MatchColumn) <= 200);
    // every key whole (the numbers scroll right instead): cut on the left, narrow rows all looked alike
    const int keyContent = static_cast<QAbstractItemView*>(table)->sizeHintForColumn(DiffModel::KeyColumn);
    QVERIFY2(keyWidth >= keyContent,
        qPrintable(QStringLiteral("key %1 of content %2, viewport %3")
                       .arg(keyWidth)
                       .arg(keyContent)
                       .arg(table->viewport()->width())));
    for (int r = 0; r < diff->proxy()->rowCount(); ++r) {
        const QModelIndex k = diff->proxy()->index(r, DiffModel::KeyColumn);
        QVERIFY(k.data(Qt::ToolTipRole).toString().startsWith(k.data().toString()));
    }
    // scrolled right to the last column, the key column stays where it was (frozen), and it is the same selection
    auto* frozen = table->findChild<QTableView*>(QStringLiteral("frozenKeyColumn"));
    QVERIFY(frozen);
    QCOMPARE(frozen->selectionModel(), table->selectionModel());
    table->horizontalScrollBar()->setValue(0);
    QVERIFY(!frozen->isVisible()); // not scrolled: the table's own key column is in place
    table->horizontalScrollBar()->setValue(table->horizontalScrollBar()->maximum());
    table->scrollTo(diff->proxy()->index(0, DiffModel::MatchColumn));
    QTest::qWait(20);
    QVERIFY(frozen->isVisible());
    QCOMPARE(frozen->columnWidth(DiffModel::KeyColumn), table->columnWidth(DiffModel::KeyColumn));
    QVERIFY(frozen->geometry().left() <= table->frameWidth() + 1);
    QCOMPARE(frozen->geometry().width(), table->columnWidth(DiffModel::KeyColumn));
    for (int c = 1; c < DiffModel::ColumnCount; ++c)
        QVERIFY(frozen->isColumnHidden(c));
    // rows line up: the same row at the same height in both
    table->verticalScrollBar()->setValue(table->verticalScrollBar()->maximum());
    QCOMPARE(frozen->verticalScrollBar()->value(), table->verticalScrollBar()->value());
    const int lastRow = diff->proxy()->rowCount() - 1;
    QCOMPARE(frozen->visualRect(diff->proxy()->index(lastRow, 0)).top(),
        table->visualRect(diff->proxy()->index(lastRow, DiffModel::MatchColumn)).top());
    // a click on the frozen key selects the row everywhere
    const QModelIndex second = diff->proxy()->index(lastRow, DiffModel::KeyColumn);
    QTest::mouseClick(frozen->viewport(), Qt::LeftButton, {}, frozen->visualRect(second).center());
    QCOMPARE(table->currentIndex().row(), lastRow);
}

void TestFlows::copyFullKeyAndContextMenus()
{
    MainWindow w;
    w.setPersistLayout(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndWait(w, testData("diff/step3.pt")));
    StateKeysPanel* keys = w.stateKeysPanel();
    const QString moment = QStringLiteral("optim.state.0.weight.exp_avg");
    const QString step = QStringLiteral("optim.state.0.weight.step");
    w.context()->select(moment);
    QClipboard* clipboard = QGuiApplication::clipboard();
    clipboard->setText(QStringLiteral("nothing"));
    // Ctrl+C in the tree: the full key, not the leaf's name "exp_avg"
    keys->view()->setFocus();
    QTest::keySequence(keys->view(), QKeySequence::Copy);
    QCOMPARE(clipboard->text(), moment);

    auto action = [](QMenu* menu, const char* name) {
        QAction* a = menu->findChild<QAction*>(QLatin1String(name));
        return a;
    };
    std::unique_ptr<QMenu> menu(keys->contextMenu(keys->model()->indexForKey(moment)));
    QVERIFY(action(menu.get(), "copyKey") && action(menu.get(), "copyValue") && action(menu.get(), "showShards")
        && action(menu.get(), "diffKey"));
    clipboard->clear();
    action(menu.get(), "copyKey")->trigger();
    QCOMPARE(clipboard->text(), moment);
    QVERIFY(!action(menu.get(), "copyValue")->isEnabled()); // not a scalar
    QVERIFY(!action(menu.get(), "diffKey")->isEnabled()); // no comparison open
    // Show in shard layout: selects the key and raises the panel
    w.raisePanel(QStringLiteral("details"));
    action(menu.get(), "showShards")->trigger();
    QCOMPARE(w.context()->selectedKey(), moment);
    QVERIFY(w.shardLayoutPanel()->isVisible());
    // a scalar: Copy value copies `step` as Python prints it
    menu.reset(keys->contextMenu(keys->model()->indexForKey(step)));
    QVERIFY(action(menu.get(), "copyValue")->isEnabled());
    action(menu.get(), "copyValue")->trigger();
    QCOMPARE(clipboard->text(), QStringLiteral("3.0"));

    // with a comparison open, Diff this key selects the key's row in the Diff table
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("diff/step4.pt"));
    QVERIFY(done.wait(Timeout));
    // the headline says how far training went between the two
    QCOMPARE(diff->stepChange(), QStringLiteral("step 3 → 4"));
    QVERIFY(diff->summaryText().contains(QStringLiteral("step 3 → 4")));
    menu.reset(keys->contextMenu(keys->model()->indexForKey(step)));
    QVERIFY(action(menu.get(), "diffKey")->isEnabled());
    action(menu.get(), "diffKey")->trigger();
    const QModelIndex current = diff->view()->currentIndex();
    QCOMPARE(current.sibling(current.row(), DiffModel::KeyColumn).data().toString(), step);
    QVERIFY(diff->isVisible());
    // one number: its two values instead of a histogram of one difference
    QCOMPARE(diff->histogram()->binCount(), 0);
    QCOMPARE(diff->histogram()->message(), QStringLiteral("B: 3.0 → A: 4.0"));

    // Diff: Ctrl+C on a number cell copies the row's full key; the row's menu copies A's value of `step`
    diff->view()->setCurrentIndex(current.sibling(current.row(), DiffModel::MaxAbsColumn));
    diff->view()->setFocus();
    clipboard->clear();
    QTest::keySequence(diff->view(), QKeySequence::Copy);
    QCOMPARE(clipboard->text(), step);
    menu.reset(diff->contextMenu(diff->view()->currentIndex()));
    QVERIFY(action(menu.get(), "copyKey") && action(menu.get(), "showShards") && action(menu.get(), "inspect"));
    action(menu.get(), "copyValue")->trigger();
    QCOMPARE(clipboard->text(), QStringLiteral("4.0")); // A is the later step, though step 3 is the open one
    clipboard->clear();
    action(menu.get(), "copyKey")->trigger();
    QCOMPARE(clipboard->text(), step);
    w.context()->select(moment);
    action(menu.get(), "showShards")->trigger();
    QCOMPARE(w.context()->selectedKey(), step);

    // another checkpoint drops the comparison: Diff this key is off again
    QVERIFY(openAndWait(w, testData("diff/step4.pt")));
    menu.reset(keys->contextMenu(keys->model()->indexForKey(step)));
    QVERIFY(!action(menu.get(), "diffKey")->isEnabled());
}

void TestFlows::scalarsShownAsValues()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("diff/step3.pt")));
    const QString step = QStringLiteral("optim.state.0.weight.step");
    // the tree shows step's value, not its shape "[]"
    const QModelIndex leaf = w.stateKeysPanel()->model()->indexForKey(step);
    QVERIFY(leaf.isValid());
    QCOMPARE(leaf.sibling(leaf.row(), StateKeysModel::ShapeColumn).data().toString(), QStringLiteral("3.0"));
    // Tensor details: the value instead of a histogram of one element
    QSignalSpy stats(w.tensorDetailsPanel(), &TensorDetailsPanel::statsReady);
    w.context()->select(step);
    QVERIFY(w.tensorDetailsPanel()->valueText().startsWith(QLatin1String("3.0\n")));
    QVERIFY(!stats.wait(300));
    QCOMPARE(w.tensorDetailsPanel()->histogram()->binCount(), 0);
    // Shard layout: no lane of "0 elements", the value and who holds it
    QVERIFY(!w.shardLayoutPanel()->layoutWidget()->shardLayout().has_value());
    QVERIFY2(w.shardLayoutPanel()->layoutWidget()->message().contains(QLatin1String("one value (3.0)")),
        qPrintable(w.shardLayoutPanel()->layoutWidget()->message()));
    // a tensor of more elements still gets its statistics, and "1 element" is singular
    w.context()->select(QStringLiteral("optim.state.0.weight.exp_avg"));
    QVERIFY(stats.wait(Timeout));
    QCOMPARE(w.tensorDetailsPanel()->statusText(), QStringLiteral("54 elements"));
    QVERIFY(w.tensorDetailsPanel()->valueText().isEmpty());
}

void TestFlows::unsafeGlobalsBannerAndRows()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("dangerous.pt")));
    StateKeysPanel* keys = w.stateKeysPanel();
    // a banner naming the class path (os.system pickles as posix.system)
    QVERIFY2(keys->bannerText().contains(QLatin1String("posix.system")), qPrintable(keys->bannerText()));
    // the row that holds it is marked: an icon, a colour, the class path in its tooltip; the tensor beside it is not
    const QModelIndex evil = keys->model()->indexForKey(QStringLiteral("evil"));
    QVERIFY(evil.isValid());
    QCOMPARE(evil.data(StateKeysModel::UnsafeRole).toStringList(), QStringList {QStringLiteral("posix.system")});
    QVERIFY(!evil.data(Qt::DecorationRole).value<QIcon>().isNull());
    QVERIFY(evil.data(Qt::ForegroundRole).isValid());
    QVERIFY(evil.data(Qt::ToolTipRole).toString().contains(QLatin1String("posix.system")));
    const QModelIndex weights = keys->model()->indexForKey(QStringLiteral("weights"));
    QVERIFY(weights.isValid());
    QVERIFY(weights.data(StateKeysModel::UnsafeRole).toStringList().isEmpty());
    QVERIFY(weights.data(Qt::DecorationRole).isNull());
    // a safe checkpoint: no banner
    QVERIFY(openAndWait(w, testData("adam_int.pt")));
    QVERIFY(keys->bannerText().isEmpty());
    // a healthy ZeRO checkpoint names DeepSpeed's own classes: said, not alarmed about, no row marked
    QVERIFY(openAndWait(w, testData("zero/stage2/ckpt")));
    QVERIFY2(keys->bannerText().contains(QLatin1String("DeepSpeed's own classes")), qPrintable(keys->bannerText()));
    QVERIFY(keys->bannerText().contains(QLatin1String("deepspeed.runtime.fp16.loss_scaler.LossScaler")));
    QVERIFY(!keys->bannerText().contains(QLatin1String("Unsafe pickle")));
    QVERIFY(keys->model()->unsafeGlobals().byKey.empty());
    QVERIFY(keys->model()->unsafeGlobals().classPaths.empty());
    // and not listed again under the tree as unsafe-global warnings (they were, in orange, below the blue banner)
    QVERIFY2(!keys->warningsText().contains(QLatin1String("unsafe-global")), qPrintable(keys->warningsText()));
    QVERIFY2(keys->warningsText().isEmpty(), qPrintable(keys->warningsText()));
}

void TestFlows::paramGroupsTable()
{
    // AdamW with two groups (weight_decay 0.1 and 0.0) against AdamW with one (weight_decay 0.01)
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("diag/two_groups.pt")));
    TensorDetailsPanel* details = w.tensorDetailsPanel();
    w.context()->select(QStringLiteral("optim.param_groups"));
    ParamGroupsModel* groups = details->paramGroupsModel();
    QCOMPARE(groups->rowCount(), 2);
    const auto& columns = groups->table().columns;
    QVERIFY(columns.size() >= 4);
    QCOMPARE(QString::fromStdString(columns[0]), QStringLiteral("lr"));
    QCOMPARE(QString::fromStdString(columns[1]), QStringLiteral("betas"));
    QCOMPARE(QString::fromStdString(columns[2]), QStringLiteral("eps"));
    QCOMPARE(QString::fromStdString(columns[3]), QStringLiteral("weight_decay"));
    QCOMPARE(groups->headerData(4, Qt::Horizontal).toString(), QStringLiteral("weight_decay"));
    QCOMPARE(groups->index(0, 4).data().toString(), QStringLiteral("0.1"));
    QCOMPARE(groups->index(1, 4).data().toString(), QStringLiteral("0.0"));
    QCOMPARE(groups->index(0, 2).data().toString(), QStringLiteral("(0.9, 0.999)"));
    QCOMPARE(groups->index(0, 0).data().toInt(), 2); // the two weights
    QVERIFY(!groups->index(0, 4).data(ParamGroupsModel::DiffersRole).toBool()); // no comparison yet

    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("diag/one_group.pt"));
    QVERIFY(done.wait(Timeout));
    w.context()->select(QStringLiteral("optim.param_groups.0"));
    QCOMPARE(groups->rowCount(), 2);
    QVERIFY(groups->index(0, 4).data(ParamGroupsModel::DiffersRole).toBool()); // 0.1 vs 0.01
    QVERIFY(groups->index(0, 4).data(Qt::BackgroundRole).isValid());
    QVERIFY(groups->index(0, 4).data(Qt::ToolTipRole).toString().contains(QLatin1String("B: 0.01")));
    QVERIFY(!groups->index(0, 1).data(ParamGroupsModel::DiffersRole).toBool()); // the same lr
    QVERIFY(groups->index(1, 1).data(ParamGroupsModel::DiffersRole).toBool()); // no group 1 in B
}

void TestFlows::diffFollowsThroughAndModes()
{
    MainWindow w;
    w.setPersistLayout(false);
    auto* compare = w.findChild<QAction*>(QStringLiteral("compareWith"));
    QVERIFY(compare); // File > Compare with…
    QVERIFY(!compare->isEnabled()); // nothing open to compare
    QVERIFY(openAndWait(w, testData("adam_int.pt")));
    QVERIFY(compare->isEnabled());
    QCOMPARE(compare->menu(), w.diffPanel()->compareMenu());
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("adam_step_mismatch.pt"));
    QVERIFY(done.wait(Timeout));
    auto currentKey = [&] {
        const QModelIndex c = diff->view()->currentIndex();
        return c.sibling(c.row(), DiffModel::KeyColumn).data().toString();
    };
    // one selection: the diff's current row is the key selected everywhere
    QCOMPARE(currentKey(), QStringLiteral("state.0.exp_avg"));
    QCOMPARE(w.context()->selectedKey(), QStringLiteral("state.0.exp_avg"));
    QSignalSpy selected(w.context(), &CheckpointContext::selectionChanged);
    QSignalSpy stats(w.findChild<TensorDetailsPanel*>(), &TensorDetailsPanel::statsReady);
    diff->showKey(QStringLiteral("state.1.exp_avg_sq")); // a click on another row
    QCOMPARE(w.context()->selectedKey(), QStringLiteral("state.1.exp_avg_sq"));
    QCOMPARE(selected.count(), 1);
    QVERIFY(stats.wait(Timeout)); // Tensor details computes the new key's statistics
    // ... and a key selected in the tree becomes the current row
    w.context()->select(QStringLiteral("state.2.exp_avg"));
    QCOMPARE(currentKey(), QStringLiteral("state.2.exp_avg"));
    // the names say which is which
    QVERIFY(diff->summaryText().contains(QLatin1String("A: adam_int.pt")));
    QVERIFY(diff->summaryText().contains(QLatin1String("B: adam_step_mismatch.pt")));

    // tolerances apply as they are typed: the same comparison runs again, and stays on the selected key
    const size_t changedExact = diff->model()->report().count(DiffStatus::Changed);
    QVERIFY(changedExact > 0);
    auto* atol = diff->findChild<QLineEdit*>(QStringLiteral("atol"));
    QVERIFY(atol);
    atol->setText(QStringLiteral("1e30"));
    QVERIFY(done.wait(Timeout));
    QVERIFY(diff->model()->report().count(DiffStatus::Changed) < changedExact);
    QVERIFY(diff->summaryText().contains(QLatin1String("atol 1e+30")));
    QCOMPARE(currentKey(), QStringLiteral("state.2.exp_avg"));
    atol->clear();
    QVERIFY(done.wait(Timeout));
    QCOMPARE(diff->model()->report().count(DiffStatus::Changed), changedExact);
}

void TestFlows::diffRankModeKeepsTheCheckpointDiff()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("fsdp2_r2"));
    QVERIFY(done.wait(Timeout));
    const size_t checkpointRows = diff->model()->report().entries.size();
    const QString checkpointSummary = diff->summaryText();
    QVERIFY(!diff->showingRanks());
    auto* back = diff->findChild<QPushButton*>(QStringLiteral("backToCheckpointDiff"));
    QVERIFY(back);
    QVERIFY(back->isHidden());
    diff->compareRanks(0, 1);
    QVERIFY(done.wait(Timeout));
    QVERIFY(diff->showingRanks());
    QVERIFY(!back->isHidden());
    QVERIFY(back->text().contains(QLatin1String("fsdp2_r2")));
    QVERIFY(diff->showCheckpointDiff()); // the button's action
    QVERIFY(!diff->showingRanks());
    QVERIFY(back->isHidden());
    QCOMPARE(diff->model()->report().entries.size(), checkpointRows);
    QCOMPARE(diff->summaryText(), checkpointSummary);
    QVERIFY(!diff->showCheckpointDiff()); // nothing more to go back to
}

void TestFlows::plotsSaveAsImages()
{
    MainWindow w;
    w.setPersistLayout(false);
    w.resize(1440, 900);
    w.show();
    auto* details = w.findChild<TensorDetailsPanel*>();
    QSignalSpy stats(details, &TensorDetailsPanel::statsReady);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    if (stats.isEmpty()) QVERIFY(stats.wait(Timeout));
    QTemporaryDir tmp;
    HistogramPlot* histogram = details->histogram();
    histogram->resize(400, 300);
    // PNG at twice the size on screen
    QVERIFY2(PlotExport::save(histogram, tmp.filePath(QStringLiteral("h.png"))).isEmpty(), "png");
    const QImage png(tmp.filePath(QStringLiteral("h.png")));
    QCOMPARE(png.size(), QSize(800, 600));
    std::set<QRgb> colours;
    for (int y = 0; y < png.height(); y += 7)
        for (int x = 0; x < png.width(); x += 7)
            colours.insert(png.pixel(x, y));
    QVERIFY(colours.size() > 3); // bars, axes and text, not a blank image
    // SVG: vector (the plot drawn again, its bars as paths), PDF: a PDF document
    QVERIFY(PlotExport::save(histogram, tmp.filePath(QStringLiteral("h.svg"))).isEmpty());
    const QString svg = readFile(tmp.filePath(QStringLiteral("h.svg")));
    QVERIFY(svg.contains(QLatin1String("<svg")));
    QVERIFY(svg.count(QLatin1String("<path")) > 10);
    QVERIFY(!svg.contains(QLatin1String("<image"))); // not a bitmap in an SVG wrapper
    QVERIFY(PlotExport::save(histogram, tmp.filePath(QStringLiteral("h.PDF"))).isEmpty());
    QVERIFY(readFile(tmp.filePath(QStringLiteral("h.PDF"))).startsWith(QLatin1String("%PDF")));
    // the shard layout (a plain widget) as SVG and PNG
    ShardLayoutWidget* lanes = w.findChild<ShardLayoutPanel*>()->layoutWidget();
    QVERIFY(PlotExport::save(lanes, tmp.filePath(QStringLiteral("lanes.svg"))).isEmpty());
    QVERIFY(readFile(tmp.filePath(QStringLiteral("lanes.svg"))).contains(QLatin1String("<svg")));
    QVERIFY(PlotExport::save(lanes, tmp.filePath(QStringLiteral("lanes.png"))).isEmpty());
    QVERIFY(!QImage(tmp.filePath(QStringLiteral("lanes.png"))).isNull());
    // failures name the file and leave nothing behind
    const QString bad = PlotExport::save(histogram, tmp.filePath(QStringLiteral("h.bmp")));
    QVERIFY(bad.contains(QLatin1String("h.bmp")));
    const QString missing = tmp.filePath(QStringLiteral("no/such/folder/h.png"));
    QVERIFY(PlotExport::save(histogram, missing).contains(QLatin1String("no/such/folder/h.png")));
    QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).size(), 5); // no temporary files left
    // every plot offers "Save image…" on right click
    for (QWidget* plot : {static_cast<QWidget*>(histogram), static_cast<QWidget*>(lanes),
             static_cast<QWidget*>(w.diffPanel()->heatmap()), static_cast<QWidget*>(w.diffPanel()->histogram())}) {
        QCOMPARE(plot->contextMenuPolicy(), Qt::CustomContextMenu);
        emit plot->customContextMenuRequested(QPoint(5, 5));
        QMenu* menu = nullptr;
        for (auto* m : plot->findChildren<QMenu*>())
            if (m->findChild<QAction*>(QStringLiteral("saveImage")) || !m->actions().isEmpty()) menu = m;
        QVERIFY(menu);
        bool found = false;
        for (auto* a : menu->actions())
            found = found || a->objectName() == QLatin1String("saveImage");
        QVERIFY(found);
        menu->close();
    }
}

void TestFlows::filterSyntaxAndValuePredicates()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("diff/step4.pt"))); // an overflow: NaN in model.0.bias, inf in its Adam moments
    StateKeysPanel* keys = w.findChild<StateKeysPanel*>();
    StateKeysModel* model = keys->model();
    auto filter = [&](const QString& text) {
        keys->filterEdit()->setText(text);
        emit keys->filterEdit()->returnPressed();
    };
    filter(QStringLiteral("model.*.bias"));
    QCOMPARE(model->matchingLeaves(), 2);
    QVERIFY(keys->filterMessage().isEmpty());
    filter(QStringLiteral("state.0 exp_avg sq")); // words: all of them, anywhere
    QCOMPARE(model->matchingLeaves(), 2);
    filter(QStringLiteral("/^optim\\.state\\.2\\./ -step"));
    QCOMPARE(model->matchingLeaves(), 4);
    filter(QStringLiteral("/state[/"));
    QCOMPARE(model->matchingLeaves(), 0);
    QVERIFY(keys->filterMessage().contains(QLatin1String("not a regular expression")));
    filter(QStringLiteral("blocks.0"));
    QCOMPARE(model->matchingLeaves(), 0);
    QVERIFY(keys->filterMessage().contains(QLatin1String("No key matches")));
    // value predicates: the values are read once in the background, then the filter applies
    QVERIFY(!model->hasValueFacts());
    filter(QStringLiteral("nan"));
    QVERIFY(keys->filterMessage().contains(QLatin1String("Reading")));
    QTRY_VERIFY_WITH_TIMEOUT(model->hasValueFacts(), Timeout);
    QCOMPARE(model->matchingLeaves(), 1);
    QVERIFY(model->indexForKey(QStringLiteral("model.0.bias")).isValid());
    QVERIFY(keys->filterMessage().isEmpty());
    filter(QStringLiteral("inf")); // read already: immediate
    QCOMPARE(model->matchingLeaves(), 2);
    filter(QStringLiteral("|x|>0.3 model dtype:fp32"));
    QCOMPARE(model->matchingLeaves(), 3);
    filter(QString());
    QVERIFY(model->matchingLeaves() > 10);

    // the Diff table's filter takes the same key terms
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("diff/step3.pt"));
    QVERIFY(done.wait(Timeout));
    auto* search = diff->findChildren<QLineEdit*>().last();
    for (auto* e : diff->findChildren<QLineEdit*>())
        if (e->placeholderText().startsWith(QLatin1String("Filter keys"))) search = e;
    search->setText(QStringLiteral("state.*exp_avg_sq"));
    QCOMPARE(diff->proxy()->rowCount(), 4);
    search->setText(QStringLiteral("/bias$/ model"));
    QCOMPARE(diff->proxy()->rowCount(), 2);
}

void TestFlows::reshardPreviewOpenAndDialogs()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("fsdp2_r3")));
    ReshardPanel* panel = w.reshardPanel();
    ShardLayoutPanel* shards = w.shardLayoutPanel();
    const QString key = QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg"); // [7, 6] on 3 ranks
    w.context()->select(key);
    auto chunkRanks = [&] {
        std::vector<int> ranks;
        if (const auto& l = shards->layoutWidget()->shardLayout()) ranks = l->ranks;
        return ranks;
    };
    QCOMPARE(chunkRanks(), (std::vector<int> {0, 1, 2}));
    // the preview: the target layout before anything is written, following the options
    panel->worldSize()->setValue(4);
    auto* preview = panel->findChild<QPushButton*>(QStringLiteral("previewLayout"));
    QVERIFY(preview);
    QTest::mouseClick(preview, Qt::LeftButton);
    QVERIFY(shards->isPreviewing());
    QVERIFY(shards->titleText().contains(QLatin1String("Preview")));
    QCOMPARE(chunkRanks(), (std::vector<int> {0, 1, 2, 3})); // torch.chunk(7, 4): 2, 2, 2, 1 rows
    QVERIFY(shards->layoutWidget()->shardLayout()->complete());
    panel->worldSize()->setValue(8); // FSDP2 on 8: rows 0-6 on ranks 0-6, rank 7 one empty chunk
    QCOMPARE(chunkRanks().size(), size_t(8));
    panel->layoutCombo()->setCurrentIndex(panel->layoutCombo()->findData(QStringLiteral("fsdp1")));
    QCOMPARE(chunkRanks().size(), size_t(7)); // FSDP1: no chunk for ranks past the last row
    w.context()->select(QStringLiteral("optim.state.blocks.0.qkv.bias.exp_avg")); // follows the selection
    QVERIFY(shards->titleText().contains(QLatin1String("Preview")));
    QCOMPARE(chunkRanks().size(), size_t(7));
    QTest::mouseClick(preview, Qt::LeftButton); // off: the checkpoint's own layout again
    QVERIFY(!shards->isPreviewing());
    QCOMPARE(chunkRanks(), (std::vector<int> {0, 1, 2}));
    // the save dialog starts beside the checkpoint, named after it and the target
    panel->worldSize()->setValue(2);
    QCOMPARE(panel->suggestedOutput(), QDir(testData("")).filePath(QStringLiteral("fsdp2_r3_2ranks")));
    // reshard, then Open resharded opens what was written
    QTemporaryDir tmp;
    const QString out = tmp.filePath(QStringLiteral("r2"));
    QSignalSpy done(panel, &ReshardPanel::finished);
    auto* open = panel->findChild<QPushButton*>(QStringLiteral("openResharded"));
    QVERIFY(open && open->isHidden());
    QTest::mouseClick(preview, Qt::LeftButton); // the preview of what is about to be written
    QVERIFY(shards->titleText().contains(QLatin1String("nothing written yet")));
    panel->reshardTo(out);
    QVERIFY(done.wait(Timeout));
    QVERIFY(!open->isHidden());
    // once saved, the preview says where it was written, not "nothing written yet"
    QVERIFY(!shards->titleText().contains(QLatin1String("nothing written yet")));
    QVERIFY(shards->titleText().contains(QLatin1String("written to")));
    panel->worldSize()->setValue(3); // another target: not written
    QVERIFY(shards->titleText().contains(QLatin1String("nothing written yet")));
    panel->worldSize()->setValue(2);
    QSignalSpy changed(w.context(), &CheckpointContext::checkpointChanged);
    QTest::mouseClick(open, Qt::LeftButton);
    QVERIFY(changed.wait(Timeout));
    QCOMPARE(QFileInfo(w.context()->path()).absoluteFilePath(), QFileInfo(out).absoluteFilePath());
    QVERIFY(open->isHidden()); // a new checkpoint: nothing written from it yet
}

void TestFlows::heatmapPerKindLabelsAndTooltips()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("diff/step3.pt")));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    diff->compareWith(testData("diff/step4.pt")); // one real Adam step: step +1, moments change by ~1e-3..1e-6
    QVERIFY(done.wait(Timeout));
    // the panel's map, and one of a chosen size showing the same report
    QVERIFY(!diff->heatmap()->keys().isEmpty());
    DiffHeatmap standalone;
    DiffHeatmap* map = &standalone;
    map->resize(500, 900);
    map->show();
    map->setReport(diff->model()->report());
    QVERIFY(map->keys().size() > 8);
    QCOMPARE(map->rowLabels().size(), map->keys().size()); // every row labelled
    auto rowOf = [&](const char* key) { return map->keys().indexOf(QString::fromLatin1(key)); };
    const int step = rowOf("optim.state.0.weight.step");
    const int expAvg = rowOf("optim.state.0.weight.exp_avg");
    const int expAvgSq = rowOf("optim.state.0.weight.exp_avg_sq");
    QVERIFY(step >= 0 && expAvg >= 0 && expAvgSq >= 0);
    QCOMPARE(map->cell(step, 0), 1.0); // the numbers stay absolute
    // step counters (Δ = 1 each, expected) come after every other tensor that differs: they used to fill the top rows
    bool counterSeen = false;
    for (int r = 0; r < map->keys().size(); ++r) {
        const bool counter = map->keys()[r].endsWith(QLatin1String(".step"));
        if (!counter && map->cell(r, 0) > 0) QVERIFY2(!counterSeen, qPrintable(map->keys()[r]));
        counterSeen = counterSeen || counter;
    }
    QVERIFY(step > expAvg && step > expAvgSq);
    QVERIFY(map->cell(expAvgSq, 0) < 1e-4);
    // per state kind: the moments are coloured against moments, not against step's Δ of 1
    QCOMPARE(map->normalization(), DiffHeatmap::Normalization::PerKind);
    QCOMPARE(map->colourValue(step, 0), 1.0);
    double largestSq = 0, largestAvg = 0;
    for (int r = 0; r < map->keys().size(); ++r) {
        if (map->keys()[r].endsWith(QLatin1String(".exp_avg_sq")))
            largestSq = std::max(largestSq, map->colourValue(r, 0));
        if (map->keys()[r].endsWith(QLatin1String(".exp_avg")))
            largestAvg = std::max(largestAvg, map->colourValue(r, 0));
    }
    QCOMPARE(largestSq, 1.0);
    QCOMPARE(largestAvg, 1.0);
    QVERIFY(map->titleText().contains(QLatin1String("per state kind")));
    // drawn: one column (a whole-tensor comparison) was once an empty map, QCPColorMap needing two cells
    const QImage image = map->grab().toImage();
    const QRect cells = map->axisRect()->rect().adjusted(2, 2, -2, -2);
    std::set<QRgb> colours;
    for (int y = cells.top(); y < cells.bottom(); y += 3)
        colours.insert(image.pixel(cells.center().x(), y));
    QVERIFY(colours.size() >= 5);
    // one log scale: the colour is max |Δ| itself
    auto* log = diff->findChild<QCheckBox*>(QStringLiteral("heatmapLogScale"));
    QVERIFY(log);
    log->setChecked(true); // the panel's checkbox sets the panel's map
    QCOMPARE(diff->heatmap()->normalization(), DiffHeatmap::Normalization::LogScale);
    map->setNormalization(DiffHeatmap::Normalization::LogScale);
    QCOMPARE(map->colourValue(expAvgSq, 0), map->cell(expAvgSq, 0));
    map->setNormalization(DiffHeatmap::Normalization::PerKind);
    log->setChecked(false);
    // tooltips say the key and the numbers
    const QString tip = map->toolTipAt(expAvg, 0);
    QVERIFY(tip.contains(QLatin1String("optim.state.0.weight.exp_avg")));
    QVERIFY(tip.contains(QStringLiteral("max |Δ|")));
    QVERIFY(map->toolTipAt(-1, 0).isEmpty());
    // a short map shows fewer rows, each labelled, and says so
    const int tall = map->keys().size();
    map->resize(500, 160);
    QVERIFY(map->keys().size() < tall);
    QVERIFY(map->keys().size() >= 4);
    QCOMPARE(map->rowLabels().size(), map->keys().size());
    QVERIFY(map->titleText().contains(QLatin1String("top")));
    // narrow: the title drops what the colour bar says too and goes on several lines rather than being cut
    map->resize(340, 160);
    const QStringList lines = map->titleText().split(QLatin1Char('\n'));
    for (const QString& line : lines) // beside the colour bar
        QVERIFY2(map->fontMetrics().horizontalAdvance(line) <= map->width() - 90, qPrintable(line));
    if (!qEnvironmentVariableIsEmpty("OPTSCOPE_TEST_SAVE_HEATMAP")) {
        map->resize(520, 420);
        PlotExport::save(map, qEnvironmentVariable("OPTSCOPE_TEST_SAVE_HEATMAP"));
    }
}

void TestFlows::diffValuesSideBySide()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, testData("diff/step3.pt")));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    QSignalSpy values(diff, &DiffPanel::valuesReady);
    diff->compareWith(testData("diff/step4.pt"));
    QVERIFY(done.wait(Timeout));
    if (values.isEmpty()) QVERIFY(values.wait(Timeout)); // the current row's values
    values.clear();
    diff->showKey(QStringLiteral("model.0.bias")); // 1-D: NaN in step 4
    QVERIFY(values.wait(Timeout));
    ValueCompareModel* m = diff->valuesModel();
    const int n = static_cast<int>(w.context()->checkpoint()->find("model.0.bias")->tensor->numel());
    QCOMPARE(m->rowCount(), n);
    // A is the later step (step 4, opened second), B the open step 3
    const CheckpointPtr a = openCheckpoint(testData("diff/step4.pt").toStdString());
    const CheckpointPtr b = w.context()->checkpoint();
    const auto sa = ValuesPreviewModel::read(*a, *a->find("model.0.bias"), 0, 100, 32);
    const auto sb = ValuesPreviewModel::read(*b, *b->find("model.0.bias"), 0, 100, 32);
    int differing = 0;
    for (int r = 0; r < n; ++r) {
        QCOMPARE(m->index(r, ValueCompareModel::IndexColumn).data().toString(), QStringLiteral("[%1]").arg(r));
        QCOMPARE(m->index(r, ValueCompareModel::AColumn).data(ValueCompareModel::SortRole).toDouble(), sa.values[r]);
        const double vb = m->index(r, ValueCompareModel::BColumn).data(ValueCompareModel::SortRole).toDouble();
        QVERIFY(vb == sb.values[r] || (std::isnan(vb) && std::isnan(sb.values[r])));
        const bool d = m->index(r, ValueCompareModel::AColumn).data(ValueCompareModel::DiffersRole).toBool();
        differing += d ? 1 : 0;
        QCOMPARE(m->index(r, ValueCompareModel::AColumn).data(Qt::BackgroundRole).isValid(), d); // marked
        if (d && !std::isnan(vb))
            QCOMPARE(m->index(r, ValueCompareModel::DeltaColumn).data().toString(),
                Format::number(sa.values[r] - sb.values[r], 4));
    }
    // as many as the diff counted (the whole tensor fits the window)
    const auto& entries = diff->model()->report().entries;
    const auto it
        = std::find_if(entries.begin(), entries.end(), [](const DiffEntry& e) { return e.key() == "model.0.bias"; });
    QCOMPARE(int64_t(differing), it->numDiff);
    QCOMPARE(m->differingCount(), differing);
    QVERIFY(diff->valuesInfo().contains(QStringLiteral("%1 differ").arg(differing)));
    auto* only = diff->findChild<QCheckBox*>(QStringLiteral("onlyDiffering"));
    only->setChecked(true);
    QCOMPARE(m->rowCount(), differing);
    only->setChecked(false);
    // a 2-D tensor: rows along dim 0, the row's elements after
    values.clear();
    diff->showKey(QStringLiteral("optim.state.0.weight.exp_avg"));
    QVERIFY(values.wait(Timeout));
    QCOMPARE(m->rowCount(), 9 * 6); // every element of every row
    QCOMPARE(m->index(1, ValueCompareModel::IndexColumn).data().toString(), QStringLiteral("[0, 1]"));
    QCOMPARE(m->index(53, ValueCompareModel::IndexColumn).data().toString(), QStringLiteral("[8, 5]"));
    QVERIFY(diff->valuesInfo().startsWith(QStringLiteral("All 54 elements")));
}

void TestFlows::diffValuesPageThroughLargeTensors()
{
    // 5,056 elements: a page of 1,024 at a time, said as such, the rest one click away
    MainWindow w;
    QVERIFY(showAt(w, QSize(1280, 720)));
    QVERIFY(openAndWait(w, testData("torchtitan/dcp")));
    DiffPanel* diff = w.diffPanel();
    QSignalSpy done(diff, &DiffPanel::finished);
    QSignalSpy values(diff, &DiffPanel::valuesReady);
    diff->compareWith(testData("torchtitan/torchtitan.pt"));
    QVERIFY(done.wait(Timeout));
    values.clear();
    diff->showKey(QStringLiteral("rng"));
    QVERIFY(values.wait(Timeout));
    ValueCompareModel* m = diff->valuesModel();
    QCOMPARE(m->rowCount(), 1024);
    QVERIFY2(
        diff->valuesInfo().startsWith(QStringLiteral("Elements 0–1,023 of 5,056")), qPrintable(diff->valuesInfo()));
    auto* previous = diff->findChild<QToolButton*>(QStringLiteral("valuesPrevious"));
    auto* next = diff->findChild<QToolButton*>(QStringLiteral("valuesNext"));
    QVERIFY(previous && next);
    QVERIFY(!previous->isEnabled());
    QVERIFY(next->isEnabled());
    for (int page = 1; page < 5; ++page) {
        values.clear();
        next->click();
        QVERIFY(values.wait(Timeout));
        QCOMPARE(
            m->index(0, ValueCompareModel::IndexColumn).data().toString(), QStringLiteral("[%1]").arg(page * 1024));
    }
    QCOMPARE(m->rowCount(), 5056 - 4 * 1024);
    QVERIFY2(
        diff->valuesInfo().startsWith(QStringLiteral("Elements 4,096–5,055 of 5,056")), qPrintable(diff->valuesInfo()));
    QVERIFY(!next->isEnabled());
    QVERIFY(previous->isEnabled());
    values.clear();
    previous->click();
    QVERIFY(values.wait(Timeout));
    QCOMPARE(m->index(0, ValueCompareModel::IndexColumn).data().toString(), QStringLiteral("[3072]"));
    // the columns are as wide as their numbers: nothing elided
    QTableView* view = diff->findChild<QTableView*>(QStringLiteral("valuesView"));
    QVERIFY(view);
    w.raisePanel(QStringLiteral("diff"));
    diff->findChild<QTabWidget*>()->setCurrentIndex(1);
    QTest::qWait(50);
    // at 1280x720, beside a sharded checkpoint's Shard layout: more than the 4 rows once seen
    QVERIFY2(
        view->viewport()->height() / view->rowHeight(0) >= 8, qPrintable(QString::number(view->viewport()->height())));
    for (int c = ValueCompareModel::AColumn; c <= ValueCompareModel::BColumn; ++c)
        QVERIFY(view->columnWidth(c) >= view->fontMetrics().horizontalAdvance(m->index(0, c).data().toString()));
}

void TestFlows::diffDirectionFollowsTraining()
{
    // whichever step is opened first, A is the later one: Δ = step 4 − step 3, relative to step 3, the same report
    // (and top key) as Watch (the newest against the one before) and the CLI's `diff step4.pt step3.pt`
    const QString step3 = testData("diff/step3.pt");
    const QString step4 = testData("diff/step4.pt");
    const auto later = openCheckpoint(step4.toStdString());
    const auto earlier = openCheckpoint(step3.toStdString());
    const std::string forward = diffCheckpoints(*later, *earlier, {}).toJson().dump();
    const std::string backward = diffCheckpoints(*earlier, *later, {}).toJson().dump();
    QVERIFY(forward != backward); // relative changes and Δ's sign tell the two apart
    for (const QSize size : {QSize(1280, 720), QSize(1440, 900)})
        for (const auto& [open, other] : {std::make_pair(step3, step4), std::make_pair(step4, step3)}) {
            MainWindow w;
            QVERIFY(showAt(w, size));
            QVERIFY(openAndWait(w, open));
            DiffPanel* diff = w.diffPanel();
            QSignalSpy done(diff, &DiffPanel::finished);
            diff->compareWith(other);
            QVERIFY(done.wait(Timeout));
            QCOMPARE(diff->stepChange(), QStringLiteral("step 3 → 4"));
            QCOMPARE(QFileInfo(diff->pathB()).fileName(), QStringLiteral("step3.pt"));
            QVERIFY2(
                diff->summaryText().contains(QStringLiteral("A is the later step")), qPrintable(diff->summaryText()));
            QCOMPARE(diff->model()->report().toJson().dump(), forward);
            const QString top = diff->proxy()->index(0, DiffModel::KeyColumn).data().toString();
            QCOMPARE(top, QStringLiteral("model.0.weight"));
            // the row selects the open checkpoint's key in the other panels, on either side
            const QModelIndex current = diff->view()->currentIndex();
            QVERIFY(current.isValid());
            QCOMPARE(
                w.context()->selectedKey(), current.sibling(current.row(), DiffModel::KeyColumn).data().toString());
            // Swap turns it round: B is the later, and the summary says so
            auto* swap = diff->findChild<QPushButton*>(QStringLiteral("swapAB"));
            QVERIFY(swap && swap->isVisible());
            done.clear();
            swap->click();
            QVERIFY(done.wait(Timeout));
            QCOMPARE(diff->stepChange(), QStringLiteral("step 4 → 3"));
            QCOMPARE(QFileInfo(diff->pathB()).fileName(), QStringLiteral("step4.pt"));
            QVERIFY(diff->summaryText().contains(QStringLiteral("swapped")));
            QCOMPARE(diff->model()->report().toJson().dump(), backward);
            QVERIFY(w.width() <= size.width());
        }
}

void TestFlows::shardLayoutRoomAndLanes()
{
    // an unsharded file's Shard layout gives its height to Tensor details / Diff / Diagnose; a sharded checkpoint's
    // gets it back, and 3 ranks get a lane each (they merged into "r0–1 / rank 2" in a short dock at 1280×720)
    for (const QSize size : {QSize(1280, 720), QSize(1440, 900)}) {
        MainWindow w;
        QVERIFY(showAt(w, size));
        QDockWidget* shards = w.dock(QStringLiteral("shards"));
        QDockWidget* details = w.dock(QStringLiteral("details"));
        const int before = shards->height();
        QVERIFY(openAndWait(w, testData("adam_int.pt")));
        QTRY_VERIFY2(shards->height() < before / 2,
            qPrintable(QStringLiteral("%1 of %2 px").arg(shards->height()).arg(size.height())));
        QVERIFY(details->height() > shards->height() * 3);
        QVERIFY(!w.shardLayoutPanel()->needsRoom());
        QVERIFY(openAndWait(w, testData("fsdp2_r3")));
        QVERIFY(w.shardLayoutPanel()->needsRoom());
        QTRY_VERIFY2(std::abs(shards->height() - before) <= 16, qPrintable(QString::number(shards->height())));
        w.context()->select(QStringLiteral("optim.state.blocks.0.qkv.weight.exp_avg"));
        QTest::qWait(20);
        ShardLayoutWidget* lanes = w.shardLayoutPanel()->layoutWidget();
        QCOMPARE(lanes->laneCount(), 3);
        QCOMPARE(lanes->ranksPerLane(), 1);
        // and in the shortest dock the user can make: the lanes scroll rather than merge
        w.resizeDocks({details, shards}, {size.height(), 1}, Qt::Vertical);
        QTest::qWait(20);
        QCOMPARE(lanes->ranksPerLane(), 1);
        QVERIFY(w.width() <= size.width());
    }
}

void TestFlows::filterOpensItsMatches()
{
    // a filter's matches are in sight: 800 of them are not left under one collapsed node (723 were, at the old
    // limit of 500); 6,000 open as many levels as keep under 5,000 rows in sight
    auto synthetic = [](int layers) {
        auto cp = std::make_shared<Checkpoint>();
        cp->path = "synthetic";
        for (int i = 0; i < layers; ++i)
            for (const char* state : {"exp_avg", "exp_avg_sq", "step"}) {
                Entry e;
                e.path = {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"), KeyPathElem::fromKey("layers"),
                    KeyPathElem::fromIndex(i), KeyPathElem::fromKey("mlp"), KeyPathElem::fromKey("weight"),
                    KeyPathElem::fromKey(state)};
                e.key = joinKeyPath(e.path);
                e.kind = EntryKind::Tensor;
                e.tensor->dtype = DType::Float32;
                e.tensor->shape = {16};
                cp->entries.push_back(std::move(e));
            }
        cp->buildIndex();
        return CheckpointPtr(cp);
    };
    MainWindow w;
    w.setPersistLayout(false);
    QSignalSpy changed(w.context(), &CheckpointContext::checkpointChanged);
    QElapsedTimer took;
    took.start();
    w.context()->adopt(QStringLiteral("synthetic"), synthetic(800));
    QVERIFY(changed.wait(Timeout));
    StateKeysPanel* keys = w.stateKeysPanel();
    keys->filterEdit()->setText(QStringLiteral("exp_avg_sq"));
    QTRY_COMPARE(keys->model()->matchingLeaves(), 800);
    for (const int layer : {0, 399, 799}) {
        const QModelIndex leaf
            = keys->model()->indexForKey(QStringLiteral("optim.state.layers.%1.mlp.weight.exp_avg_sq").arg(layer));
        QVERIFY(leaf.isValid());
        for (QModelIndex up = leaf.parent(); up.isValid(); up = up.parent())
            QVERIFY2(keys->view()->isExpanded(up), qPrintable(up.data().toString()));
    }
    // far more matches: the levels above them open, the rows in sight stay bounded
    w.context()->adopt(QStringLiteral("synthetic"), synthetic(3000));
    QVERIFY(changed.wait(Timeout));
    keys->filterEdit()->setText(QStringLiteral("exp_avg"));
    QTRY_COMPARE(keys->model()->matchingLeaves(), 6000);
    // one walk of the open tree per burst of rows, not one per row (15 s here before)
    QVERIFY2(took.elapsed() < 5000, qPrintable(QString::number(took.elapsed())));
    const QModelIndex layers = keys->model()->indexForKey(QStringLiteral("optim.state.layers"));
    QVERIFY(layers.isValid());
    QVERIFY(keys->view()->isExpanded(layers));
    QVERIFY(!keys->view()->isExpanded(keys->model()->index(1500, 0, layers))); // (layer 0 holds the selected key)
}

void TestFlows::fqnConfidenceInSight()
{
    // how sure a name is has a column of its own with a colour (it was a suffix in a tooltip at the end of an elided
    // column), and at the docked width every FQN reads whole
    for (const QSize size : {QSize(1280, 720), QSize(1440, 900)}) {
        MainWindow w;
        QVERIFY(showAt(w, size));
        FqnMappingPanel* fqn = w.fqnMappingPanel();
        QSignalSpy mapped(fqn, &FqnMappingPanel::mappingReady);
        QVERIFY(openAndWait(w, testData("hf/checkpoint-ambiguous")));
        QVERIFY(mapped.count() > 0 || mapped.wait(Timeout));
        w.raisePanel(QStringLiteral("fqn"));
        QTest::qWait(50);
        QMap<QString, QColor> colours;
        for (int r = 0; r < fqn->model()->rowCount(); ++r) {
            const QModelIndex sure = fqn->model()->index(r, FqnMappingModel::ConfidenceColumn);
            colours[sure.data().toString()] = sure.data(Qt::DecorationRole).value<QColor>();
            QVERIFY(!sure.data(Qt::ToolTipRole).toString().isEmpty());
        }
        QVERIFY2(colours.contains(QStringLiteral("order assumed")) && colours.contains(QStringLiteral("unique shape")),
            qPrintable(QStringList(colours.keys()).join(QLatin1Char(','))));
        QVERIFY(colours[QStringLiteral("order assumed")] != colours[QStringLiteral("unique shape")]);
        QTableView* view = fqn->view();
        QVERIFY(view->columnWidth(FqnMappingModel::FqnColumn)
            >= static_cast<QAbstractItemView*>(view)->sizeHintForColumn(FqnMappingModel::FqnColumn));
        QVERIFY(view->columnWidth(FqnMappingModel::ConfidenceColumn)
            >= view->fontMetrics().horizontalAdvance(QStringLiteral("order assumed")));
    }
}

void TestFlows::commandLineRequestsApply()
{
    // `optscope optim.pt --reference model.pt --select K --world-size 2` (the app applies it once the file is open;
    // outside --screenshot these options once did nothing)
    MainWindow w;
    w.setPersistLayout(false);
    const QString dir = testData("load_cases/compiled/");
    QVERIFY(openAndWait(w, dir + QStringLiteral("optim.pt")));
    QSignalSpy done(w.diagnosePanel(), &DiagnosePanel::finished);
    MainWindow::StartRequest request;
    request.select = QStringLiteral("optimizer.state.0.exp_avg_sq");
    request.reference = dir + QStringLiteral("model.pt");
    request.worldSize = 2;
    w.applyStart(request);
    QVERIFY(done.wait(Timeout));
    QCOMPARE(w.context()->selectedKey(), request.select);
    QCOMPARE(w.reshardPanel()->worldSize()->value(), 2);
    QVERIFY(w.diagnosePanel()->summaryText().contains(QStringLiteral("against")));
    QCOMPARE(w.diagnosePanel()->model()->rowCount(), 3);
}

void TestFlows::watchFolderFollowsARun()
{
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(w.findChild<QAction*>(QStringLiteral("watchFolder")));
    WatchPanel* watch = w.watchPanel();
    QTemporaryDir run;
    const QByteArray step4 = [] {
        QFile f(testData("diff/step4.pt"));
        f.open(QIODevice::ReadOnly);
        return f.readAll();
    }();
    QVERIFY(QFile::copy(testData("diff/step3.pt"), run.filePath(QStringLiteral("ckpt_3.pt"))));
    QSignalSpy read(watch, &WatchPanel::stepRead);
    watch->setFollow(true);
    watch->watch(run.path()); // the first look: ckpt_3 seen, not yet known to be complete
    QVERIFY(read.isEmpty());
    watch->pollNow(); // unchanged since: complete
    QVERIFY(read.wait(Timeout));
    QCOMPARE(watch->steps().size(), size_t(1));
    QTRY_COMPARE_WITH_TIMEOUT(QFileInfo(w.context()->path()).fileName(), QStringLiteral("ckpt_3.pt"), Timeout);

    // ckpt_4 arrives in two writes: half of it is not a checkpoint (it does not open), then all of it
    const QString path4 = run.filePath(QStringLiteral("ckpt_4.pt"));
    {
        QFile f(path4);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(step4.left(step4.size() / 2));
    }
    watch->pollNow();
    watch->pollNow(); // stable, tried, fails to open: waits
    QTest::qWait(300);
    QCOMPARE(watch->steps().size(), size_t(1));
    {
        QFile f(path4);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(step4);
    }
    QSignalSpy diffDone(w.diffPanel(), &DiffPanel::finished);
    QSignalSpy jobs(w.context()->runner(), &JobRunner::jobStarted);
    watch->pollNow(); // changed
    watch->pollNow(); // stable: read and compared with ckpt_3
    QVERIFY(read.wait(Timeout));
    QCOMPARE(watch->steps().size(), size_t(2));
    QVERIFY(watch->steps().back().second.contains(QLatin1String("changed from the step before")));
    // max |Δ| of each key at step 4, as the core's comparison of the two files says; the step counters (+1 per
    // step, the largest Δ of this run) are left out of the chart, where they hid every other key
    const DiffReport reference = diffCheckpoints(*openCheckpoint(testData("diff/step4.pt").toStdString()),
        *openCheckpoint(testData("diff/step3.pt").toStdString()), DiffOptions {});
    const auto series = watch->series(QStringLiteral("model.0.weight"));
    QCOMPARE(series.size(), size_t(1));
    QCOMPARE(series.front().first, int64_t(4));
    for (const auto& e : reference.entries)
        if (e.key() == "model.0.weight") QCOMPARE(series.front().second, e.maxAbsDiff);
    QVERIFY(series.front().second > 0);
    QVERIFY(watch->series(QStringLiteral("optim.state.0.weight.step")).empty());
    QVERIFY(!watch->chartedKeys().isEmpty());
    QVERIFY(!watch->chartedKeys().contains(QStringLiteral("optim.state.0.weight.step")));
    // followed: the window shows ckpt_4, compared with ckpt_3
    QTRY_VERIFY_WITH_TIMEOUT(!diffDone.isEmpty(), Timeout);
    QCOMPARE(QFileInfo(w.context()->path()).fileName(), QStringLiteral("ckpt_4.pt"));
    QCOMPARE(QFileInfo(w.diffPanel()->pathB()).fileName(), QStringLiteral("ckpt_3.pt"));
    QVERIFY2(w.diffPanel()->stepChange().contains(QStringLiteral("3 → 4")), qPrintable(w.diffPanel()->stepChange()));
    QVERIFY(w.diffPanel()->summaryText().contains(QLatin1String("DIFFERENT")));
    // ... from what the watch read and compared: the same checkpoint object, and no second comparison (a run of
    // 100k keys would otherwise be read three times and diffed twice per step)
    QCOMPARE(w.context()->checkpoint(), watch->latestCheckpoint());
    for (const auto& args : jobs)
        QVERIFY2(!args.at(1).toString().startsWith(QLatin1String("A: ")), qPrintable(args.at(1).toString()));

    // a writer's temporary file is not a step; a broken step is skipped once a later one is complete
    QFile::copy(testData("diff/step4.pt"), run.filePath(QStringLiteral(".ckpt_9.pt.tmp")));
    {
        QFile f(run.filePath(QStringLiteral("ckpt_5.pt")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a checkpoint");
    }
    watch->pollNow();
    watch->pollNow(); // ckpt_5 fails
    QTest::qWait(300);
    QVERIFY(QFile::copy(testData("diff/step3.pt"), run.filePath(QStringLiteral("ckpt_6.pt"))));
    watch->pollNow();
    watch->pollNow(); // ckpt_6 complete: ckpt_5 skipped, ckpt_6 read
    QTRY_COMPARE_WITH_TIMEOUT(watch->steps().size(), size_t(4), Timeout);
    QVERIFY(watch->steps()[2].second.startsWith(QLatin1String("skipped")));
    QCOMPARE(watch->steps()[3].first, QStringLiteral("ckpt_6.pt"));
    QCOMPARE(watch->series(QStringLiteral("model.0.weight")).size(), size_t(2)); // 4 -> 6 compared
    // every one of the 16 tensors is tracked with the default cap of 32; with a cap of 4, only the keys that were
    // among the 4 most changed at some step have a series (a run of 100k keys keeps a few series, not 100k)
    QCOMPARE(watch->series(QStringLiteral("optim.state.0.weight.exp_avg_sq")).size(), size_t(2));
    watch->stop();
    watch->setTrackedPerStep(4);
    watch->setFollow(false);
    watch->watch(run.path());
    watch->pollNow();
    QTRY_VERIFY_WITH_TIMEOUT(watch->steps().size() >= 4, Timeout);
    int tracked = 0;
    for (const char* key : {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias",
             "optim.state.0.weight.step", "optim.state.0.bias.step", "optim.state.2.weight.step",
             "optim.state.2.bias.step", "optim.state.0.weight.exp_avg", "optim.state.0.bias.exp_avg",
             "optim.state.2.weight.exp_avg", "optim.state.2.bias.exp_avg", "optim.state.0.weight.exp_avg_sq",
             "optim.state.0.bias.exp_avg_sq", "optim.state.2.weight.exp_avg_sq", "optim.state.2.bias.exp_avg_sq"})
        tracked += watch->series(QString::fromLatin1(key)).empty() ? 0 : 1;
    QVERIFY2(tracked >= 4 && tracked <= 8, qPrintable(QString::number(tracked))); // 4 per comparison, 2 comparisons
    QCOMPARE(watch->series(QStringLiteral("optim.state.0.weight.exp_avg_sq")).size(), size_t(0));

    // catching up on a run that is already there (ckpt_3, 4, broken 5, 6) opens only its newest step in the window
    watch->stop();
    watch->setTrackedPerStep(32);
    watch->setFollow(true);
    QSignalSpy shown(w.context(), &CheckpointContext::checkpointChanged);
    watch->watch(run.path());
    watch->pollNow();
    QTRY_VERIFY_WITH_TIMEOUT(watch->steps().size() >= 4, Timeout);
    QTRY_COMPARE_WITH_TIMEOUT(QFileInfo(w.context()->path()).fileName(), QStringLiteral("ckpt_6.pt"), Timeout);
    QTest::qWait(200);
    QCOMPARE(shown.size(), 1);
    // back to an older step: a row opens its checkpoint; a skipped one has nothing to open; the panel starts a watch
    // itself too
    watch->openStep(0);
    QTRY_COMPARE_WITH_TIMEOUT(QFileInfo(w.context()->path()).fileName(), QStringLiteral("ckpt_3.pt"), Timeout);
    watch->openStep(2); // ckpt_5, skipped
    QTest::qWait(200);
    QCOMPARE(QFileInfo(w.context()->path()).fileName(), QStringLiteral("ckpt_3.pt"));
    QVERIFY(watch->findChild<QPushButton*>(QStringLiteral("startWatching")));
    {
        // the chart (issue 30 item 7): the legend below the data, not over it; every y tick label once (whole
        // decades); after switching to another folder, not the previous run's axes
        QCustomPlot* chart = watch->chart();
        chart->replot();
        QVERIFY(chart->legend->visible());
        QVERIFY(!chart->axisRect()->insetLayout()->elements(false).contains(chart->legend));
        QVERIFY(chart->legend->outerRect().top() >= chart->axisRect()->outerRect().bottom());
        const QVector<QString> labels = chart->yAxis->tickVectorLabels();
        QVERIFY(!labels.isEmpty());
        QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());
        for (const double tick : chart->xAxis->tickVector()) // whole steps only
            QCOMPARE(tick, std::round(tick));
        QTemporaryDir other;
        watch->watch(other.path());
        QCOMPARE(chart->xAxis->range().lower, 0.0);
        QCOMPARE(chart->xAxis->range().upper, 1.0);
        QVERIFY(!chart->legend->visible());
    }
    watch->stop();
    QVERIFY(!watch->isWatching());
    QVERIFY(watch->steps().empty());
}

void TestFlows::diagnoseNamesDeepSpeedAsTheLoader()
{
    // a ZeRO folder with a rank file missing: the error text is DeepSpeed's, and the panel says so
    QTemporaryDir tmp;
    const QString ckpt = tmp.filePath(QStringLiteral("ckpt"));
    QVERIFY(QDir().mkpath(ckpt + QStringLiteral("/global_step2")));
    const QDir src(testData("zero/stage2/ckpt"));
    QVERIFY(QFile::copy(src.filePath(QStringLiteral("latest")), ckpt + QStringLiteral("/latest")));
    for (const QString& f : QDir(src.filePath(QStringLiteral("global_step2"))).entryList(QDir::Files))
        if (!f.startsWith(QLatin1String("zero_pp_rank_1")))
            QVERIFY(QFile::copy(
                src.filePath(QStringLiteral("global_step2/") + f), ckpt + QStringLiteral("/global_step2/") + f));
    MainWindow w;
    w.setPersistLayout(false);
    QVERIFY(openAndWait(w, ckpt));
    DiagnosePanel* diag = w.diagnosePanel();
    QSignalSpy done(diag, &DiagnosePanel::finished);
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    bool found = false;
    for (int r = 0; r < diag->proxy()->rowCount(); ++r) {
        if (diag->proxy()->index(r, DiagnosisModel::CodeColumn).data(DiagnosisModel::SortRole).toString()
            != QLatin1String("zero-missing-rank-file"))
            continue;
        diag->view()->setCurrentIndex(diag->proxy()->index(r, 0));
        QVERIFY2(diag->detailsText().contains(QLatin1String("DeepSpeed would raise")), qPrintable(diag->detailsText()));
        QVERIFY(!diag->detailsText().contains(QLatin1String("PyTorch would raise")));
        found = true;
    }
    QVERIFY(found);

    // the whole checkpoint, loaded on another world size than the 2 ranks that saved it: DeepSpeed's refusal
    QVERIFY(openAndWait(w, testData("zero/stage2/ckpt")));
    QCOMPARE(diag->worldSizeBox()->value(), 0); // another checkpoint starts "as saved"
    auto codes = [&] {
        QStringList out;
        for (int r = 0; r < diag->proxy()->rowCount(); ++r)
            out << diag->proxy()->index(r, DiagnosisModel::CodeColumn).data(DiagnosisModel::SortRole).toString();
        return out;
    };
    diag->worldSizeBox()->setValue(2);
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    QVERIFY(!codes().contains(QLatin1String("zero-world-size-change")));
    QVERIFY2(diag->summaryText().contains(QLatin1String("loaded on as many")), qPrintable(diag->summaryText()));
    diag->worldSizeBox()->setValue(4);
    diag->diagnose();
    QVERIFY(done.wait(Timeout));
    const int row = static_cast<int>(codes().indexOf(QLatin1String("zero-world-size-change")));
    QVERIFY2(row >= 0, qPrintable(codes().join(QLatin1Char(' '))));
    diag->view()->setCurrentIndex(diag->proxy()->index(row, 0));
    QVERIFY2(diag->detailsText().contains(QLatin1String("DeepSpeed would raise")), qPrintable(diag->detailsText()));
    QVERIFY(diag->detailsText().contains(QLatin1String("used a DP world size of 2 but the current world size is 4")));
    QVERIFY(diag->detailsText().contains(QLatin1String("ds_to_universal")));
    // every finding's name shows whole
    for (int r = 0; r < diag->proxy()->rowCount(); ++r) {
        const QString name = diag->proxy()->index(r, DiagnosisModel::CodeColumn).data().toString();
        QVERIFY2(
            diag->view()->fontMetrics().horizontalAdvance(name) < diag->view()->columnWidth(DiagnosisModel::CodeColumn),
            qPrintable(name));
    }
}

OPTSCOPE_GUI_TEST_MAIN(TestFlows)
#include "test_flows.moc"

void TestFlows::windowNeverGrowsPastTheScreen()
{
    // a checkpoint whose data cannot be read, under a path far wider than the screen: its long texts (status bar,
    // errors, summaries) once widened the window past the screen, for good (issue 30, item 1)
    QTemporaryDir tmp;
    const QString deep = tmp.filePath(QString(120, QLatin1Char('d')) + QStringLiteral("/")
        + QString(120, QLatin1Char('e')) + QStringLiteral("/") + QString(120, QLatin1Char('f')));
    QVERIFY(QDir().mkpath(deep));
    QVERIFY(QFile::copy(testData("scale/r16_l1/.metadata"), deep + QStringLiteral("/.metadata"))); // no data files
    MainWindow w;
    w.setPersistLayout(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const QRect screen = w.screen()->availableGeometry();
    auto within = [&] {
        QTest::qWait(100); // the layouts settle
        return w.frameGeometry().width() <= screen.width() && w.frameGeometry().height() <= screen.height();
    };
    QSignalSpy failed(w.context(), &CheckpointContext::loadFailed);
    QSignalSpy changed(w.context(), &CheckpointContext::checkpointChanged);
    w.openPath(deep);
    QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty() || !changed.isEmpty(), Timeout);
    QVERIFY2(within(),
        qPrintable(QStringLiteral("%1 px wide on a %2 px screen").arg(w.frameGeometry().width()).arg(screen.width())));
    for (QDockWidget* dock : w.findChildren<QDockWidget*>()) {
        dock->show();
        dock->raise();
        QVERIFY2(
            within(), qPrintable(dock->windowTitle() + QStringLiteral(": %1 px wide").arg(w.frameGeometry().width())));
    }
    w.showMaximized();
    QVERIFY(within());
    w.showNormal();
    QVERIFY(openAndWait(w, testData("adam_int.pt"))); // a small checkpoint after it: still within
    QVERIFY(within());
}
