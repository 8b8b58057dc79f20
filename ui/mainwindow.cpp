// SPDX-License-Identifier: GPL-3.0-or-later
#include "mainwindow.h"

#include "optscope/checkpoint_loader.h"
#include "optscope/error.h"

#include <QLabel>

namespace optscope::ui {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_summary(new QLabel(this))
{
    setWindowTitle(QStringLiteral("OptScope"));
    m_summary->setAlignment(Qt::AlignCenter);
    m_summary->setText(tr("Open a checkpoint (torch.save file or DCP folder)"));
    setCentralWidget(m_summary);
    resize(900, 600);
}

MainWindow::~MainWindow() = default;

void MainWindow::openPath(const QString& path)
{
    try {
        m_checkpoint = openCheckpoint(path.toStdString());
        m_summary->setText(tr("%1\n%2 entries, %3 tensors")
                               .arg(path)
                               .arg(m_checkpoint->entries.size())
                               .arg(m_checkpoint->tensorCount()));
    } catch (const Error& e) {
        m_summary->setText(tr("Cannot open %1:\n%2").arg(path, QString::fromStdString(e.what())));
    }
}

} // namespace optscope::ui
