// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QHash>
#include <QMainWindow>
#include <QStringList>

class QDockWidget;
class QLabel;
class QMenu;
class QProgressBar;
class QToolButton;

namespace optscope::ui {

class CheckpointContext;
class DiagnosePanel;
class ComparisonSession;
class ReshardPreview;
class WatchSession;
class DiffPanel;
class FqnMappingPanel;
class ReshardPanel;
class ShardLayoutPanel;
class WatchPanel;
class StateKeysPanel;
class TensorDetailsPanel;

/// The OptScope main window: one CheckpointContext shared by dockable panels, menus with recent files, drag and drop,
/// a status bar with progress and cancel for every background job, and a remembered window/dock layout.
class MainWindow : public QMainWindow
{
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    /// opens a checkpoint in the background; errors are shown in the window, never thrown
    void openPath(const QString& path);
    /// what the command line asks for besides the path (`optscope CKPT [COMPARE] --select K --reference MODEL
    /// --world-size N`), for the open checkpoint: the app and its screenshot mode both apply it with applyStart()
    struct StartRequest
    {
        QString select; ///< a key to select
        QString compare; ///< a second checkpoint to compare with
        QString reference; ///< a model (or FQN list) to diagnose against: Diagnose runs and is raised
        int worldSize = 0; ///< Reshard and verify's target world size
    };
    void applyStart(const StartRequest& request);
    /// File > Watch Folder…: follows a training run's checkpoint folder in the Watch panel and raises it
    void watchFolder(const QString& folder);
    /// the bundled demo checkpoint (File > Open Demo); empty if none was found
    void setDemoPath(const QString& path);
    QString demoPath() const { return m_demoPath; }
    /// restores window geometry and dock layout from QSettings (the default layout otherwise)
    void restoreLayout();
    /// whether closing saves the layout (off for screenshots and tests)
    void setPersistLayout(bool persist) { m_persistLayout = persist; }
    /// off: the window may be larger than its screen (a screenshot rendered offscreen at a given size)
    void setFitToScreen(bool fit);
    void resetLayout();

    CheckpointContext* context() const { return m_context; }
    StateKeysPanel* stateKeysPanel() const { return m_keys; }
    TensorDetailsPanel* tensorDetailsPanel() const { return m_details; }
    FqnMappingPanel* fqnMappingPanel() const { return m_fqn; }
    ShardLayoutPanel* shardLayoutPanel() const { return m_shards; }
    DiffPanel* diffPanel() const { return m_diff; }
    ComparisonSession* comparison() const { return m_comparison; }
    DiagnosePanel* diagnosePanel() const { return m_diagnose; }
    ReshardPanel* reshardPanel() const { return m_reshard; }
    WatchPanel* watchPanel() const { return m_watch; }
    WatchSession* watchSession() const { return m_watchSession; }

    /// panel names for --panel: keys, details, fqn, shards, diff, diagnose, reshard
    static QStringList panelNames();
    /// Help > Getting started: the three jobs in the app's own names of menus and panels
    static QString gettingStartedText();
    QDockWidget* dock(const QString& name) const;
    void raisePanel(const QString& name);
    QStringList recentFiles() const;

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    /// the window never exceeds its screen's available area, whatever a label's text asks for
    void fitToScreen();
    /// the Shard layout dock gives its height to the panels above it when the open checkpoint is not sharded, and
    /// takes back what it had when one is
    void fitShardLayout(bool needsRoom);
    /// the running job's label in the status bar, elided to StatusTextWidth (the whole text in its tooltip)
    void setJobText(const QString& text);
    static constexpr int StatusTextWidth = 420;
    bool m_fitToScreen = true;
    QDockWidget* addPanel(const QString& name, const QString& title, QWidget* panel, const QKeySequence& shortcut);
    void setupMenus();
    void setupStatusBar();
    void addRecent(const QString& path);
    void updateRecentMenu();
    void updateTitle();
    void showAbout();
    void showGettingStarted();

    CheckpointContext* m_context;
    StateKeysPanel* m_keys = nullptr;
    TensorDetailsPanel* m_details = nullptr;
    FqnMappingPanel* m_fqn = nullptr;
    ShardLayoutPanel* m_shards = nullptr;
    ComparisonSession* m_comparison = nullptr;
    ReshardPreview* m_reshardPreview = nullptr;
    WatchSession* m_watchSession = nullptr;
    DiffPanel* m_diff = nullptr;
    DiagnosePanel* m_diagnose = nullptr;
    ReshardPanel* m_reshard = nullptr;
    WatchPanel* m_watch = nullptr;
    QHash<QString, QDockWidget*> m_docks;
    QMenu* m_viewMenu = nullptr;
    QMenu* m_recentMenu = nullptr;
    QLabel* m_jobLabel = nullptr;
    quint64 m_unpinnedSaid = 0; ///< remote objects read unpinned that the status bar has told of
    QProgressBar* m_progress = nullptr;
    QToolButton* m_cancel = nullptr;
    QLabel* m_checkpointLabel = nullptr;
    QString m_demoPath;
    QByteArray m_defaultState;
    int m_shardRoom = 260; ///< the Shard layout dock's height before it gave it up
    bool m_persistLayout = true;
};

} // namespace optscope::ui
