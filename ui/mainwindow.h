// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QMainWindow>

#include <memory>

class QLabel;

namespace optscope {
class Checkpoint;
}

namespace optscope::ui {

class MainWindow : public QMainWindow
{
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    /// opens a checkpoint; errors are shown in the window, never thrown
    void openPath(const QString& path);

private:
    QLabel* m_summary = nullptr;
    std::shared_ptr<const Checkpoint> m_checkpoint;
};

} // namespace optscope::ui
