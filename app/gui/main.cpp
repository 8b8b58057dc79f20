// SPDX-License-Identifier: GPL-3.0-or-later
#include "mainwindow.h"
#include "optscope/base/error.h"
#include "optscope/io/remote_requests.h"
#include "optscope/io/storage.h"
#include "screenshotdriver.h"
#include "session/checkpointcontext.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QFont>
#include <QIcon>
#include <QScreen>
#include <QStyleFactory>
#include <QTimer>

#include <algorithm>
#include <cstdio>

namespace {

/// the bundled demo checkpoint: installed next to the binary (../share/optscope/demo), else the source tree's
QString findDemo()
{
    const QString installed
        = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("../share/optscope/demo/checkpoint"));
    if (QFileInfo(installed + QStringLiteral("/.metadata")).exists()) return QDir::cleanPath(installed);
    const QString source = QStringLiteral(OPTSCOPE_DEMO_DIR);
    if (QFileInfo(source + QStringLiteral("/.metadata")).exists()) return source;
    return {};
}

/// the command line; shared by the text-only path (--help, --version) and the app
struct CommandLine
{
    QCommandLineOption screenshot {QStringLiteral("screenshot"),
        QStringLiteral("render the window (or --panel) to a PNG once loaded, then exit"), QStringLiteral("file.png")};
    QCommandLineOption panel {QStringLiteral("panel"),
        QStringLiteral("panel to render: %1").arg(optscope::ui::MainWindow::panelNames().join(QLatin1String(", "))),
        QStringLiteral("name")};
    QCommandLineOption select {QStringLiteral("select"), QStringLiteral("key to select"), QStringLiteral("key")};
    QCommandLineOption reference {QStringLiteral("reference"),
        QStringLiteral("Diagnose against this model checkpoint or FQN list"), QStringLiteral("path")};
    QCommandLineOption worldSize {
        QStringLiteral("world-size"), QStringLiteral("Reshard & verify: target world size"), QStringLiteral("n")};
    QCommandLineOption size {
        QStringLiteral("size"), QStringLiteral("screenshot size, e.g. 1400x900"), QStringLiteral("WxH")};
    QCommandLineOption watch {QStringLiteral("watch"),
        QStringLiteral("follow a training run's checkpoint folder (step_100/, step_200/, ...): each step is read and "
                       "compared with the one before, the newest is shown (Watch panel)"),
        QStringLiteral("folder")};
    QCommandLineOption timeout {QStringLiteral("timeout"),
        QStringLiteral("--screenshot: give up (exit 2) when not done after this many seconds (default 120)"),
        QStringLiteral("seconds")};

    void setup(QCommandLineParser& parser) const
    {
        parser.setApplicationDescription(QStringLiteral("Inspector and debugger for PyTorch optimizer checkpoints"));
        parser.addHelpOption();
        parser.addVersionOption();
        parser.addPositionalArgument(QStringLiteral("path"),
            QStringLiteral("checkpoint to open (torch.save file or DCP folder); the demo checkpoint without one"));
        parser.addPositionalArgument(QStringLiteral("compare"),
            QStringLiteral("a second checkpoint to compare with (Diff)"), QStringLiteral("[compare]"));
        parser.addOptions({screenshot, panel, select, reference, worldSize, size, watch, timeout});
    }
};

void setIdentity()
{
    QCoreApplication::setApplicationName(QStringLiteral("OptScope"));
    QCoreApplication::setOrganizationName(QStringLiteral("OptScope"));
    QCoreApplication::setApplicationVersion(QStringLiteral(OPTSCOPE_VERSION));
}

/// --help / --version print and exit: they must work without a display (over ssh, in CI), where constructing a
/// QApplication aborts
bool onlyPrints(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        const QByteArray a(argv[i]);
        if (a == "-h" || a == "--help" || a == "-?" || a == "--help-all" || a == "-v" || a == "--version") return true;
        if (a == "--") break;
    }
    return false;
}

} // namespace

int main(int argc, char** argv)
{
    const CommandLine commandLine;
    if (onlyPrints(argc, argv)) {
        QCoreApplication core(argc, argv);
        setIdentity();
        QCommandLineParser parser;
        commandLine.setup(parser);
        parser.process(core); // prints and exits
        return 0;
    }
    QApplication::setAttribute(Qt::AA_Use96Dpi);
    QApplication app(argc, argv);
    // once the event loop ends, a scalar read, a statistics job or a diff may still be reading a remote object, and
    // the exit waits for every thread: their requests are given up rather than waited out (a stalled server: minutes)
    QObject::connect(&app, &QCoreApplication::aboutToQuit, [] { optscope::abandonRemoteRequests(); });
    setIdentity();
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/optscope/optscope.png")));

    QCommandLineParser parser;
    commandLine.setup(parser);
    parser.process(app);
    const auto& [screenshot, panel, select, reference, worldSize, size, watch, timeout] = commandLine;

    const QStringList args = parser.positionalArguments();
    const QString demo = findDemo();
    const QString watchFolder = parser.value(watch);
    if (!watchFolder.isEmpty() && !args.isEmpty()) {
        // the watch opens the run's newest step itself: a checkpoint given too would be replaced at once
        std::fprintf(stderr, "optscope: --watch opens the newest step of %s; give no checkpoint path with it\n",
            qPrintable(watchFolder));
        return 2;
    }
    if (!watchFolder.isEmpty()) {
        // a run's folder on disk or on object storage (s3://, gs://), asked as the Watch itself asks (before: a
        // QFileInfo, which called every URL "not a folder")
        bool folder = false;
        try {
            folder = optscope::isFolder(watchFolder.toStdString());
        } catch (const optscope::Error& e) {
            std::fprintf(stderr, "optscope: --watch: %s\n", e.what());
            return 2;
        }
        if (!folder) {
            std::fprintf(stderr, "optscope: --watch %s: not a folder\n",
                optscope::displayLocation(watchFolder.toStdString()).c_str());
            return 2;
        }
    }
    const QString path = !watchFolder.isEmpty() ? QString() : args.isEmpty() ? demo : args.at(0);
    const QString compare = args.size() > 1 ? args.at(1) : QString();

    if (parser.isSet(screenshot)) {
        // deterministic rendering: one style, one font, 96 DPI
        QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
        QApplication::setFont(QFont(QStringLiteral("DejaVu Sans"), 9));
        if (path.isEmpty() && watchFolder.isEmpty()) {
            std::fprintf(stderr, "optscope --screenshot: no checkpoint given and no demo checkpoint found\n");
            return 2;
        }
        const QString panelName = parser.value(panel);
        if (!panelName.isEmpty() && !optscope::ui::MainWindow::panelNames().contains(panelName)) {
            std::fprintf(stderr, "optscope --screenshot: unknown panel '%s'\n", qPrintable(panelName));
            return 2;
        }
        optscope::ui::MainWindow window;
        window.setPersistLayout(false);
        window.setDemoPath(demo);
        optscope::app::ScreenshotDriver::Options options;
        options.output = parser.value(screenshot);
        options.panel = panelName;
        options.select = parser.value(select);
        options.compare = compare;
        options.reference = parser.value(reference);
        options.worldSize = parser.value(worldSize).toInt();
        options.watch = watchFolder;
        if (parser.isSet(timeout)) {
            bool ok = false;
            const double seconds = parser.value(timeout).toDouble(&ok);
            if (!ok || seconds <= 0) {
                std::fprintf(
                    stderr, "optscope --timeout: not a number of seconds: %s\n", qPrintable(parser.value(timeout)));
                return 2;
            }
            options.timeoutMs = static_cast<int>(std::min(seconds * 1000, 1e9));
        }
        const QStringList wh = parser.value(size).split(QLatin1Char('x'));
        if (wh.size() == 2) options.size = QSize(wh[0].toInt(), wh[1].toInt());
        window.setFitToScreen(false); // rendered offscreen at the size asked for, whatever the screen
        if (panelName.isEmpty()) window.resize(options.size.isValid() ? options.size : QSize(1440, 900));
        window.show();
        optscope::app::ScreenshotDriver driver(&window, options);
        int exitCode = 0;
        QObject::connect(&driver, &optscope::app::ScreenshotDriver::finished, &app, [&](int code) {
            exitCode = code;
            app.exit(code);
        });
        if (watchFolder.isEmpty())
            driver.start(path);
        else
            driver.startWatch(watchFolder);
        app.exec();
        return exitCode;
    }

    optscope::ui::MainWindow window;
    window.setDemoPath(demo);
    window.restoreLayout();
    // a screen smaller than the default 1440x900 (a 1280x720 laptop): start maximised, not half off the screen
    if (const QScreen* screen = window.screen()) {
        const QRect avail = screen->availableGeometry();
        if (!avail.contains(window.frameGeometry())) {
            window.resize(window.size().boundedTo(avail.size()));
            window.move(avail.topLeft());
            window.setWindowState(window.windowState() | Qt::WindowMaximized);
        }
    }
    window.show();
    if (!watchFolder.isEmpty()) window.watchFolder(watchFolder);
    if (!path.isEmpty()) window.openPath(path);
    // what the command line asks for, once the checkpoint is open (as the screenshot mode does it: these options did
    // nothing outside it, `optscope optim.pt --reference model.pt` showed an undiagnosed file)
    optscope::ui::MainWindow::StartRequest request;
    request.select = parser.value(select);
    request.compare = compare;
    request.reference = parser.value(reference);
    request.worldSize = parser.value(worldSize).toInt();
    QObject::connect(
        window.context(), &optscope::ui::CheckpointContext::checkpointChanged, &window,
        [&window, request] { window.applyStart(request); }, Qt::SingleShotConnection);
    return app.exec();
}
