// SPDX-License-Identifier: GPL-3.0-or-later
#include "mainwindow.h"

#include "common/format.h"
#include "common/warning.h"
#include "panels/diagnosepanel.h"
#include "panels/diffpanel.h"
#include "panels/fqnmappingpanel.h"
#include "panels/reshardpanel.h"
#include "panels/shardlayoutpanel.h"
#include "panels/statekeyspanel.h"
#include "panels/tensordetailspanel.h"
#include "panels/watchpanel.h"
#include "session/checkpointcontext.h"
#include "session/comparisonsession.h"
#include "session/jobrunner.h"
#include "session/reshardpreview.h"
#include "session/watchsession.h"

#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/storage.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScreen>
#include <QSettings>
#include <QShowEvent>
#include <QSpinBox>
#include <QStatusBar>
#include <QTimer>
#include <QToolButton>
#include <QWindow>

namespace optscope::ui {

namespace {
constexpr int MaxRecent = 10;
constexpr int LayoutVersion = 2; // 2: the Watch dock
const QString kRecentKey = QStringLiteral("recentFiles");
} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_context(new CheckpointContext(this))
{
    setObjectName(QStringLiteral("OptScopeMainWindow"));
    setWindowIcon(QIcon(QStringLiteral(":/optscope/optscope.png")));
    setAcceptDrops(true);
    setDockNestingEnabled(true);
    setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowNestedDocks | QMainWindow::AllowTabbedDocks);
    setTabPosition(Qt::AllDockWidgetAreas, QTabWidget::North);
    // all content lives in docks; the central widget is a zero-size placeholder
    auto* central = new QWidget(this);
    central->setMaximumSize(0, 0);
    setCentralWidget(central);

    m_keys = new StateKeysPanel(m_context, this);
    m_details = new TensorDetailsPanel(m_context, this);
    m_fqn = new FqnMappingPanel(m_context, this);
    m_reshardPreview = new ReshardPreview(this);
    m_shards = new ShardLayoutPanel(m_context, m_reshardPreview, this);
    m_comparison = new ComparisonSession(m_context, this);
    m_diff = new DiffPanel(m_context, m_comparison, this);
    m_diagnose = new DiagnosePanel(m_context, this);
    m_reshard = new ReshardPanel(m_context, m_reshardPreview, this);
    m_watchSession = new WatchSession(m_context, m_comparison, this);
    m_watch = new WatchPanel(m_context, m_watchSession, this);
    addPanel(QStringLiteral("keys"), tr("State keys"), m_keys, QKeySequence(Qt::ALT | Qt::Key_1));
    addPanel(QStringLiteral("details"), tr("Tensor details"), m_details, QKeySequence(Qt::ALT | Qt::Key_2));
    addPanel(QStringLiteral("shards"), tr("Shard layout"), m_shards, QKeySequence(Qt::ALT | Qt::Key_3));
    addPanel(QStringLiteral("fqn"), tr("FQN mapping"), m_fqn, QKeySequence(Qt::ALT | Qt::Key_4));
    addPanel(QStringLiteral("diff"), tr("Diff"), m_diff, QKeySequence(Qt::ALT | Qt::Key_5));
    addPanel(QStringLiteral("diagnose"), tr("Diagnose"), m_diagnose, QKeySequence(Qt::ALT | Qt::Key_6));
    addPanel(QStringLiteral("reshard"), tr("Reshard and verify"), m_reshard, QKeySequence(Qt::ALT | Qt::Key_7));
    addPanel(QStringLiteral("watch"), tr("Watch"), m_watch, QKeySequence(Qt::ALT | Qt::Key_8));

    setupMenus();
    setupStatusBar();
    resetLayout();
    m_defaultState = saveState(LayoutVersion);
    // an explicit minimum: the layout then no longer raises the window's minimum to what its widest label asks for
    // (a long path or error text made the window wider than the screen, for good)
    setMinimumSize(QSize(480, 320));
    resize(1440, 900);
    fitToScreen();

    connect(m_fqn, &FqnMappingPanel::jumpRequested, this, [this] { raisePanel(QStringLiteral("keys")); });
    connect(m_diff, &DiffPanel::jumpRequested, this, [this] { raisePanel(QStringLiteral("details")); });
    connect(m_diff, &DiffPanel::showInShardLayoutRequested, this, [this] { raisePanel(QStringLiteral("shards")); });
    connect(
        m_keys, &StateKeysPanel::showInShardLayoutRequested, this, [this] { raisePanel(QStringLiteral("shards")); });
    connect(m_keys, &StateKeysPanel::diffKeyRequested, this, [this](const QString& key) {
        raisePanel(QStringLiteral("diff"));
        m_diff->showKey(key);
    });
    connect(m_diff, &DiffPanel::finished, this, [this](bool) { m_keys->setDiffAvailable(m_diff->hasReport()); });
    connect(m_comparison, &ComparisonSession::otherChanged, m_details, &TensorDetailsPanel::setComparison);
    connect(m_diagnose, &DiagnosePanel::openRequested, this, &MainWindow::openPath);
    connect(m_reshard, &ReshardPanel::openRequested, this, &MainWindow::openPath);
    // a preview turned on or changed: its drawing comes to the front
    connect(m_reshardPreview, &ReshardPreview::targetChanged, this, [this] {
        if (m_reshardPreview->target()) raisePanel(QStringLiteral("shards"));
    });
    connect(m_shards, &ShardLayoutPanel::needsRoomChanged, this, &MainWindow::fitShardLayout);
    connect(m_context, &CheckpointContext::loadStarted, this,
        [this](const QString& path) { statusBar()->showMessage(tr("Opening %1…").arg(Format::displayPath(path))); });
    connect(m_context, &CheckpointContext::checkpointChanged, this, [this] {
        updateTitle();
        m_keys->setDiffAvailable(false); // the Diff panel drops its report with the old checkpoint
        if (!m_context->path().isEmpty()) {
            // start on something to look at
            if (m_context->selectedKey().isEmpty()) m_context->select(m_context->representativeKey());
            addRecent(m_context->path());
            statusBar()->showMessage(tr("Opened %1").arg(Format::displayPath(m_context->path())), 5000);
        }
    });
    connect(m_context, &CheckpointContext::loadFailed, this, [this](const QString& path, const QString& message) {
        statusBar()->showMessage(tr("Cannot open %1").arg(Format::displayPath(path)), 10000);
        if (isVisible() && !QApplication::platformName().startsWith(QLatin1String("offscreen")))
            showWarning(this, tr("Cannot open checkpoint"), tr("Cannot open %1:\n\n%2").arg(path, message));
    });
    connect(m_context, &CheckpointContext::loadCancelled, this, [this](const QString& path) {
        statusBar()->showMessage(tr("Stopped opening %1").arg(Format::displayPath(path)), 5000);
    });
    connect(m_context, &CheckpointContext::referenceFailed, this, [this](const QString& path, const QString& message) {
        statusBar()->showMessage(tr("Cannot open the model %1: %2").arg(Format::displayPath(path), message), 10000);
    });
    updateTitle();
}

MainWindow::~MainWindow() = default;

QStringList MainWindow::panelNames()
{
    return {QStringLiteral("keys"), QStringLiteral("details"), QStringLiteral("shards"), QStringLiteral("fqn"),
        QStringLiteral("diff"), QStringLiteral("diagnose"), QStringLiteral("reshard"), QStringLiteral("watch")};
}

QDockWidget* MainWindow::addPanel(
    const QString& name, const QString& title, QWidget* panel, const QKeySequence& shortcut)
{
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(QStringLiteral("dock_") + name);
    dock->setWidget(panel);
    dock->setFeatures(
        QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable | QDockWidget::DockWidgetClosable);
    m_docks.insert(name, dock);
    // Alt+N shows and raises the panel (the View menu's check boxes toggle it)
    auto* go = new QAction(title, this);
    go->setObjectName(QStringLiteral("goto_") + name);
    go->setShortcut(shortcut);
    go->setShortcutContext(Qt::ApplicationShortcut);
    connect(go, &QAction::triggered, this, [this, name] { raisePanel(name); });
    addAction(go);
    return dock;
}

QDockWidget* MainWindow::dock(const QString& name) const
{
    return m_docks.value(name);
}

void MainWindow::raisePanel(const QString& name)
{
    if (QDockWidget* d = m_docks.value(name)) {
        d->show();
        d->raise();
        if (d->widget()) d->widget()->setFocus(Qt::OtherFocusReason);
    }
}

void MainWindow::resetLayout()
{
    // left: State keys | FQN mapping (tabs); right: Tensor details | Diff | Diagnose | Reshard (tabs) over Shard layout
    for (QDockWidget* d : std::as_const(m_docks)) {
        removeDockWidget(d);
        d->setFloating(false);
    }
    auto* keys = dock(QStringLiteral("keys"));
    auto* details = dock(QStringLiteral("details"));
    addDockWidget(Qt::LeftDockWidgetArea, keys);
    addDockWidget(Qt::RightDockWidgetArea, details);
    splitDockWidget(details, dock(QStringLiteral("shards")), Qt::Vertical);
    tabifyDockWidget(keys, dock(QStringLiteral("fqn")));
    tabifyDockWidget(details, dock(QStringLiteral("diff")));
    tabifyDockWidget(details, dock(QStringLiteral("diagnose")));
    tabifyDockWidget(details, dock(QStringLiteral("reshard")));
    tabifyDockWidget(details, dock(QStringLiteral("watch")));
    for (QDockWidget* d : std::as_const(m_docks))
        d->show();
    keys->raise();
    details->raise();
    resizeDocks({keys, details}, {560, 860}, Qt::Horizontal);
    resizeDocks({details, dock(QStringLiteral("shards"))}, {560, 260}, Qt::Vertical);
}

void MainWindow::applyStart(const StartRequest& request)
{
    if (!request.select.isEmpty()) m_context->select(request.select);
    if (request.worldSize > 0) m_reshard->worldSize()->setValue(request.worldSize);
    if (!request.compare.isEmpty()) m_diff->compareWith(request.compare);
    if (!request.reference.isEmpty()) {
        m_diagnose->setReference(request.reference);
        m_diagnose->diagnose();
        raisePanel(QStringLiteral("diagnose"));
    }
}

void MainWindow::fitShardLayout(bool needsRoom)
{
    QDockWidget* shards = dock(QStringLiteral("shards"));
    QDockWidget* details = dock(QStringLiteral("details"));
    // only where the two still share a column as the default layout puts them (the user's own layout stays)
    if (shards->isFloating() || details->isFloating() || !shards->isVisible()
        || dockWidgetArea(shards) != dockWidgetArea(details) || shards->x() != details->x())
        return;
    const int total = details->height() + shards->height();
    if (!needsRoom) m_shardRoom = shards->height();
    // after the panel's layout took in its hidden lanes (a smaller minimum), not before
    QTimer::singleShot(0, this, [this, details, shards, total, needsRoom] {
        if (needsRoom)
            resizeDocks({details, shards}, {std::max(total - m_shardRoom, 1), m_shardRoom}, Qt::Vertical);
        else
            resizeDocks({details, shards}, {total, 1}, Qt::Vertical); // its minimum: the title and the summary
    });
}

void MainWindow::restoreLayout()
{
    QSettings settings;
    const QByteArray geometry = settings.value(QStringLiteral("window/geometry")).toByteArray();
    const QByteArray state = settings.value(QStringLiteral("window/state")).toByteArray();
    if (!geometry.isEmpty()) restoreGeometry(geometry);
    if (!state.isEmpty() && !restoreState(state, LayoutVersion)) resetLayout();
}

void MainWindow::setJobText(const QString& text)
{
    m_jobLabel->setText(m_jobLabel->fontMetrics().elidedText(text, Qt::ElideRight, StatusTextWidth));
    m_jobLabel->setToolTip(text);
}

void MainWindow::showEvent(QShowEvent* event)
{
    QMainWindow::showEvent(event);
    if (QWindow* window = windowHandle())
        connect(window, &QWindow::screenChanged, this, &MainWindow::fitToScreen, Qt::UniqueConnection);
    fitToScreen();
}

void MainWindow::setFitToScreen(bool fit)
{
    m_fitToScreen = fit;
    if (fit)
        fitToScreen();
    else
        setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
}

void MainWindow::fitToScreen()
{
    const QScreen* s = screen();
    if (!s || !m_fitToScreen) return;
    // the frame (title bar, borders) is known once shown; before, a guess that leaves room for one
    const QSize frame = isVisible() ? frameGeometry().size() - geometry().size() : QSize(16, 40);
    const QSize room = s->availableGeometry().size() - frame;
    setMaximumSize(room.expandedTo(minimumSize()));
    if (width() > room.width() || height() > room.height()) resize(size().boundedTo(room));
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    m_context->runner()->cancelAll();
    if (m_persistLayout) {
        QSettings settings;
        settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
        settings.setValue(QStringLiteral("window/state"), saveState(LayoutVersion));
    }
    QMainWindow::closeEvent(event);
}

void MainWindow::setupMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* openFile
        = file->addAction(QIcon::fromTheme(QStringLiteral("document-open")), tr("&Open File…"), this, [this] {
              const QString path = QFileDialog::getOpenFileName(this, tr("Open checkpoint"), QString(),
                  tr("PyTorch checkpoints (*.pt *.pth *.bin *.ckpt *.tar .metadata *.distcp *.safetensors "
                     "*.index.json);;All files (*)"));
              // a DCP checkpoint's .metadata or .distcp file means its folder
              if (!path.isEmpty()) openPath(QString::fromStdString(checkpointPathFor(path.toStdString())));
          });
    openFile->setShortcut(QKeySequence::Open);
    QAction* openFolder
        = file->addAction(QIcon::fromTheme(QStringLiteral("folder-open")), tr("Open &Folder…"), this, [this] {
              const QString path = QFileDialog::getExistingDirectory(this, tr("Open DCP checkpoint folder"));
              if (!path.isEmpty()) openPath(path);
          });
    openFolder->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    QAction* openUrl = file->addAction(
        QIcon::fromTheme(QStringLiteral("folder-remote")), tr("Open &URL…"), this, [this] {
            bool ok = false;
            const QString url = QInputDialog::getText(this, tr("Open a checkpoint where it lives"),
                tr("s3://bucket/prefix, gs://bucket/prefix or https://host/path (read in place; credentials as the AWS "
                   "tools take them: AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_ENDPOINT_URL …)"),
                QLineEdit::Normal, QString(), &ok)
                                    .trimmed();
            if (!ok || url.isEmpty()) return;
            if (!optscope::isUrl(url.toStdString())) {
                showWarning(this, tr("Open URL"),
                    tr("%1 is not a URL OptScope reads: use s3://, gs://, http:// or https://").arg(url));
                return;
            }
            openPath(url);
        });
    openUrl->setObjectName(QStringLiteral("openUrl"));
    openUrl->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
    QAction* openRaw = file->addAction(tr("Open File &Raw…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this,
            tr("Open one file as the torch.save or safetensors file it is (not the checkpoint it belongs to)"),
            m_context->path().isEmpty() ? QString() : QFileInfo(m_context->path()).absolutePath(),
            tr("torch.save and safetensors files (*.pt *.pth *.bin *.ckpt *.safetensors);;All files (*)"));
        if (!path.isEmpty()) m_context->open(QFileInfo(path).absoluteFilePath(), CheckpointContext::OpenAs::RawFile);
    });
    openRaw->setObjectName(QStringLiteral("openRaw"));
    openRaw->setToolTip(tr("A DeepSpeed rank file shows its flat partitions and DeepSpeed objects as stored"));
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addSeparator();
    // the Diff panel's own pickers (File…, Folder…): B starts beside A
    QMenu* compare = m_diff->compareMenu();
    compare->menuAction()->setObjectName(QStringLiteral("compareWith"));
    file->addMenu(compare);
    connect(compare, &QMenu::triggered, this, [this] { raisePanel(QStringLiteral("diff")); });
    QAction* watch = file->addAction(tr("&Watch Folder…"), this, [this] {
        const QString folder = QFileDialog::getExistingDirectory(this, tr("Watch a training run's checkpoint folder"),
            m_context->path().isEmpty() ? QString() : QFileInfo(m_context->path()).absolutePath());
        if (!folder.isEmpty()) watchFolder(folder);
    });
    watch->setObjectName(QStringLiteral("watchFolder"));
    QAction* watchUrl = file->addAction(tr("Watch U&RL…"), this, [this] {
        bool ok = false;
        const QString url = QInputDialog::getText(this, tr("Watch a training run's checkpoints where they live"),
            tr("s3://bucket/run_prefix or gs://bucket/run_prefix (listed again at every look)"), QLineEdit::Normal,
            QString(), &ok)
                                .trimmed();
        if (!ok || url.isEmpty()) return;
        if (!optscope::isUrl(url.toStdString()) || !optscope::canListFolder(url.toStdString())) {
            showWarning(this, tr("Watch URL"),
                tr("%1 cannot be listed: watch an s3:// or gs:// prefix (a plain HTTP server cannot list a folder)")
                    .arg(url));
            return;
        }
        watchFolder(url);
    });
    watchUrl->setObjectName(QStringLiteral("watchUrl"));
    file->addSeparator();
    QAction* demo = file->addAction(tr("Open &Demo Checkpoint"), this, [this] {
        if (!m_demoPath.isEmpty()) openPath(m_demoPath);
    });
    demo->setObjectName(QStringLiteral("openDemo"));
    QAction* reload = file->addAction(tr("Re&load"), this, [this] {
        if (!m_context->path().isEmpty())
            m_context->open(m_context->path(),
                m_context->isRaw() ? CheckpointContext::OpenAs::RawFile : CheckpointContext::OpenAs::Checkpoint);
    });
    reload->setShortcut(QKeySequence::Refresh);
    file->addAction(tr("&Close"), m_context, &CheckpointContext::close)->setShortcut(QKeySequence::Close);
    file->addSeparator();
    file->addAction(tr("&Quit"), this, &QWidget::close)->setShortcut(QKeySequence::Quit);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(tr("&Find Key…"), this,
            [this] {
                raisePanel(QStringLiteral("keys"));
                m_keys->focusFilter();
            })
        ->setShortcut(QKeySequence::Find);
    QAction* cancel = edit->addAction(tr("&Cancel Running Jobs"), m_context->runner(), &JobRunner::cancelAll);
    cancel->setShortcut(QKeySequence(Qt::Key_Escape));

    m_viewMenu = menuBar()->addMenu(tr("&View"));
    for (const QString& name : panelNames())
        m_viewMenu->addAction(m_docks.value(name)->toggleViewAction());
    m_viewMenu->addSeparator();
    QMenu* go = m_viewMenu->addMenu(tr("&Go to Panel"));
    for (const QString& name : panelNames())
        go->addAction(findChild<QAction*>(QStringLiteral("goto_") + name));
    m_viewMenu->addSeparator();
    m_viewMenu->addAction(tr("&Reset Layout"), this, &MainWindow::resetLayout);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    QAction* guide = help->addAction(tr("&Getting Started"), this, &MainWindow::showGettingStarted);
    guide->setShortcut(QKeySequence::HelpContents);
    guide->setObjectName(QStringLiteral("gettingStarted"));
    help->addAction(tr("&About OptScope"), this, &MainWindow::showAbout);
    help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
    updateRecentMenu();
}

void MainWindow::setupStatusBar()
{
    m_checkpointLabel = new QLabel(this);
    m_jobLabel = new QLabel(this);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_progress->setMaximumWidth(180);
    m_progress->setMaximumHeight(16);
    m_progress->setTextVisible(false);
    m_cancel = new QToolButton(this);
    m_cancel->setText(tr("Cancel"));
    m_cancel->setToolTip(tr("Cancel the running jobs (Esc)"));
    m_cancel->setAutoRaise(true);
    statusBar()->addPermanentWidget(m_jobLabel);
    statusBar()->addPermanentWidget(m_progress);
    statusBar()->addPermanentWidget(m_cancel);
    statusBar()->addPermanentWidget(m_checkpointLabel);
    m_jobLabel->hide();
    m_progress->hide();
    m_cancel->hide();

    JobRunner* runner = m_context->runner();
    connect(m_cancel, &QToolButton::clicked, runner, &JobRunner::cancelAll);
    // show the bar only for jobs that take a moment: no flicker for quick statistics
    auto* showTimer = new QTimer(this);
    showTimer->setSingleShot(true);
    showTimer->setInterval(250);
    connect(showTimer, &QTimer::timeout, this, [this, runner] {
        if (runner->isIdle()) return;
        setJobText(runner->currentLabel());
        m_jobLabel->show();
        m_progress->show();
        m_cancel->show();
    });
    connect(runner, &JobRunner::jobStarted, this, [this, showTimer](quint64, const QString& label) {
        setJobText(label);
        m_progress->setValue(0);
        if (!showTimer->isActive() && m_progress->isHidden()) showTimer->start();
    });
    connect(runner, &JobRunner::progress, this, [this](const QString& label, double fraction, const QString& stage) {
        QString text = stage.isEmpty() ? label : QStringLiteral("%1 — %2").arg(label, stage);
        // reading remote storage: what is on the wire
        if (const auto remote = optscope::remoteTransferStats(); remote.requests > 0)
            text += tr(" — %1 fetched, %2 requests in flight")
                        .arg(Format::bytes(remote.bytesFetched))
                        .arg(remote.inFlight);
        setJobText(text);
        m_progress->setValue(static_cast<int>(fraction * 1000));
    });
    connect(m_cancel, &QToolButton::clicked, this, [this] { statusBar()->showMessage(tr("Cancelled"), 3000); });
    connect(runner, &JobRunner::jobFinished, this, [this, runner](quint64, const QString&, bool) {
        if (!runner->isIdle()) setJobText(runner->currentLabel());
        // an object read with nothing to hold the reads to one version: said once per new one, as the CLI says it
        if (const auto remote = optscope::remoteTransferStats(); remote.unpinnedObjects > m_unpinnedSaid) {
            m_unpinnedSaid = remote.unpinnedObjects;
            statusBar()->showMessage(QString::fromStdString(optscope::unpinnedObjectsNote(remote)), 30000);
        }
    });
    connect(runner, &JobRunner::idle, this, [this, showTimer] {
        showTimer->stop();
        m_jobLabel->hide();
        m_progress->hide();
        m_cancel->hide();
    });
}

void MainWindow::openPath(const QString& path)
{
    m_context->open(Format::location(path)); // a URL is read in place, as it is
}

void MainWindow::watchFolder(const QString& folder)
{
    m_watchSession->watch(folder);
    raisePanel(QStringLiteral("watch"));
}

void MainWindow::setDemoPath(const QString& path)
{
    m_demoPath = path;
    if (QAction* a = findChild<QAction*>(QStringLiteral("openDemo"))) a->setEnabled(!path.isEmpty());
}

QStringList MainWindow::recentFiles() const
{
    return QSettings().value(kRecentKey).toStringList();
}

void MainWindow::addRecent(const QString& path)
{
    if (!m_persistLayout || path == m_demoPath) return;
    QSettings settings;
    QStringList recent = settings.value(kRecentKey).toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > MaxRecent)
        recent.removeLast();
    settings.setValue(kRecentKey, recent);
    updateRecentMenu();
}

void MainWindow::updateRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = recentFiles();
    for (int i = 0; i < recent.size(); ++i) {
        const QString path = recent[i];
        QAction* a = m_recentMenu->addAction(
            QStringLiteral("&%1  %2").arg(i + 1).arg(path), this, [this, path] { openPath(path); });
        a->setEnabled(QFileInfo::exists(path));
    }
    if (recent.isEmpty()) m_recentMenu->addAction(tr("(none)"))->setEnabled(false);
    m_recentMenu->addSeparator();
    m_recentMenu->addAction(tr("Clear List"), this, [this] {
        QSettings().remove(kRecentKey);
        updateRecentMenu();
    });
}

void MainWindow::updateTitle()
{
    const QString path = m_context->path();
    if (path.isEmpty()) {
        setWindowTitle(tr("OptScope"));
        m_checkpointLabel->setText(QString());
        return;
    }
    QString name = QFileInfo(path).fileName();
    if (path == m_demoPath) name = tr("demo checkpoint");
    if (m_context->isRaw()) name = tr("%1 (raw file)").arg(name);
    setWindowTitle(tr("%1 — OptScope").arg(name));
    // elided in the middle (the file name stays): a long path must not widen the status bar past the window
    const QString shown
        = m_context->isRaw() ? tr("%1 (raw file)").arg(Format::displayPath(path)) : Format::displayPath(path);
    m_checkpointLabel->setText(m_checkpointLabel->fontMetrics().elidedText(shown, Qt::ElideMiddle, StatusTextWidth));
    m_checkpointLabel->setToolTip(path);
}

QString MainWindow::gettingStartedText()
{
    return tr(
        "<h3>Getting started</h3>"
        "<p>Open a checkpoint with <b>File &gt; Open File…</b> (a torch.save file, safetensors) or <b>Open "
        "Folder…</b> (a DCP folder, per-rank files, a DeepSpeed, Megatron or Hugging Face Trainer checkpoint). "
        "Nothing in it is executed. <b>State keys</b> lists every entry; select one to see its statistics, values and "
        "shard layout.</p>"
        "<p><b>Compare two steps.</b> Open the newer one, then <b>File &gt; Compare with</b> and pick the older one. "
        "The <b>Diff</b> panel sorts keys by max |Δ|, most changed first; select a row for A | B | Δ values and the "
        "Δ histogram. <b>File &gt; Watch Folder…</b> follows a run's checkpoint folder and diffs each new step.</p>"
        "<p><b>An optimizer that does not load.</b> Open the checkpoint, go to <b>Diagnose</b>, and give the model it "
        "should load into (<b>Browse</b>: a model checkpoint or a list of FQNs) and, if you have it, the optimizer "
        "your "
        "loading code builds (<b>Target optimizer</b>). Each finding shows the error PyTorch raises and the fix; the "
        "summary says what each load path does. <b>Apply fix and save as…</b> writes a corrected copy; <b>Open "
        "fixed</b> diagnoses it again.</p>"
        "<p><b>Another world size.</b> In <b>Reshard and verify</b>, choose the ranks and layout: <b>Verify</b> "
        "proves by a load that the new layout holds the same values; <b>Reshard and save…</b> writes the DCP folder "
        "and checks it, and <b>Shard layout</b> previews it.</p>"
        "<p>Every panel has a right-click menu (copy the full key or value, show in the shard layout, diff this "
        "key). Long work runs in the background; <b>Esc</b> cancels it.</p>");
}

void MainWindow::showGettingStarted()
{
    QMessageBox box(this);
    box.setWindowTitle(tr("Getting started"));
    box.setTextFormat(Qt::RichText);
    box.setText(gettingStartedText());
    box.exec();
}

void MainWindow::showAbout()
{
    QMessageBox::about(this, tr("About OptScope"),
        tr("<h3>OptScope %1</h3><p>Inspector and debugger for PyTorch optimizer checkpoints: torch.save files and "
           "torch.distributed.checkpoint folders, read without running Python or unpickling code.</p>"
           "<p>License: GPL-3.0-or-later. Plots: QCustomPlot.</p>")
            .arg(QApplication::applicationVersion()));
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls() && !event->mimeData()->urls().isEmpty()
        && event->mimeData()->urls().constFirst().isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (urls.isEmpty() || !urls.constFirst().isLocalFile()) return;
    // a dropped .metadata or .distcp file means its DCP folder
    openPath(QString::fromStdString(checkpointPathFor(urls.constFirst().toLocalFile().toStdString())));
    event->acceptProposedAction();
}

} // namespace optscope::ui
