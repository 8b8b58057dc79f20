// SPDX-License-Identifier: GPL-3.0-or-later
#include "mainwindow.h"

#include <QApplication>
#include <QCommandLineParser>

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("OptScope"));
    QApplication::setApplicationVersion(QStringLiteral(OPTSCOPE_VERSION));
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Inspector and debugger for PyTorch optimizer checkpoints"));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("path"), QStringLiteral("checkpoint to open"));
    parser.process(app);
    optscope::ui::MainWindow window;
    if (!parser.positionalArguments().isEmpty())
        window.openPath(parser.positionalArguments().constFirst());
    window.show();
    return app.exec();
}
