// SPDX-License-Identifier: GPL-3.0-or-later
// `optscope --screenshot`: the app renders itself offscreen to a PNG and exits; the image must show real content.
#include "guitest.h"

#include <QFileInfo>
#include <QHash>
#include <QImage>
#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>

namespace {

struct Shot
{
    int exitCode = -1;
    QImage image;
    QString output;
};

Shot run(const QStringList& args, const QString& png)
{
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    p.setProcessEnvironment(env);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(OPTSCOPE_GUI_BINARY), QStringList {QStringLiteral("--screenshot"), png} + args);
    Shot s;
    if (!p.waitForFinished(120000)) {
        p.kill();
        return s;
    }
    s.exitCode = p.exitCode();
    s.output = QString::fromUtf8(p.readAll());
    s.image.load(png);
    return s;
}

/// not blank: many colours, and no colour covers almost everything
bool nonTrivial(const QImage& image, int minColours)
{
    QHash<QRgb, int> histogram;
    for (int y = 0; y < image.height(); y += 2)
        for (int x = 0; x < image.width(); x += 2)
            ++histogram[image.pixel(x, y)];
    int top = 0, total = 0;
    for (int n : histogram) {
        top = std::max(top, n);
        total += n;
    }
    return histogram.size() >= minColours && top < total * 0.9;
}

} // namespace

class TestScreenshot : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void wholeWindowOfTheDemo();
    void eachPanel_data();
    void eachPanel();
    void badArguments();
    void helpAndVersionWithoutDisplay();
};

void TestScreenshot::wholeWindowOfTheDemo()
{
    QTemporaryDir tmp;
    const QString png = tmp.filePath(QStringLiteral("window.png"));
    // no path: the bundled demo checkpoint
    const Shot s = run({QStringLiteral("--size"), QStringLiteral("1280x800")}, png);
    QVERIFY2(s.exitCode == 0, qPrintable(s.output));
    QVERIFY(QFileInfo(png).size() > 20000);
    QCOMPARE(s.image.size(), QSize(1280, 800));
    QVERIFY(nonTrivial(s.image, 200));
}

void TestScreenshot::eachPanel_data()
{
    QTest::addColumn<QStringList>("args");
    const QString demo = QStringLiteral(OPTSCOPE_DEMO_DIR "/checkpoint");
    QTest::newRow("keys") << QStringList {QStringLiteral("--panel"), QStringLiteral("keys"), testData("fsdp2_r3")};
    QTest::newRow("details") << QStringList {
        QStringLiteral("--panel"), QStringLiteral("details"), testData("fsdp2_r3")};
    QTest::newRow("shards") << QStringList {QStringLiteral("--panel"), QStringLiteral("shards"),
        QStringLiteral("--select"), QStringLiteral("optim.state.blocks.0.head.weight.exp_avg"), testData("fsdp2_r3")};
    QTest::newRow("fqn") << QStringList {QStringLiteral("--panel"), QStringLiteral("fqn"), testData("compiled.pt")};
    QTest::newRow("diff") << QStringList {
        QStringLiteral("--panel"), QStringLiteral("diff"), demo, QStringLiteral(OPTSCOPE_DEMO_DIR "/checkpoint-step2")};
    QTest::newRow("diagnose") << QStringList {QStringLiteral("--panel"), QStringLiteral("diagnose"),
        QStringLiteral("--reference"), QStringLiteral(OPTSCOPE_DEMO_DIR "/compiled_fqns.txt"), demo};
    QTest::newRow("reshard") << QStringList {QStringLiteral("--panel"), QStringLiteral("reshard"),
        QStringLiteral("--world-size"), QStringLiteral("2"), testData("fsdp2_r3")};
}

void TestScreenshot::eachPanel()
{
    QFETCH(QStringList, args);
    QTemporaryDir tmp;
    const QString png = tmp.filePath(QStringLiteral("panel.png"));
    const Shot s = run(args, png);
    QVERIFY2(s.exitCode == 0, qPrintable(s.output));
    QVERIFY(!s.image.isNull());
    QCOMPARE(s.image.size(), QSize(1100, 680));
    QVERIFY(nonTrivial(s.image, 20));
}

void TestScreenshot::badArguments()
{
    QTemporaryDir tmp;
    const QString png = tmp.filePath(QStringLiteral("x.png"));
    Shot s = run({QStringLiteral("--panel"), QStringLiteral("nope"), testData("adam_int.pt")}, png);
    QCOMPARE(s.exitCode, 2);
    s = run({testData("manifest.json")}, png);
    QCOMPARE(s.exitCode, 2);
    QVERIFY(s.output.contains(QLatin1String("cannot open")));
    QVERIFY(!QFileInfo::exists(png));
}

void TestScreenshot::helpAndVersionWithoutDisplay()
{
    // no display and Qt's default platform (xcb): --help and --version still print and exit 0, never abort
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* name : {"QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"})
        env.remove(QLatin1String(name));
    for (const QString& arg : {QStringLiteral("--help"), QStringLiteral("--version")}) {
        QProcess p;
        p.setProcessEnvironment(env);
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(QStringLiteral(OPTSCOPE_GUI_BINARY), {arg});
        QVERIFY(p.waitForFinished(60000));
        const QString out = QString::fromUtf8(p.readAll());
        QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, qPrintable(out));
        QVERIFY2(
            out.contains(arg == QLatin1String("--help") ? QLatin1String("--screenshot") : QLatin1String("OptScope")),
            qPrintable(out));
    }
}

OPTSCOPE_GUI_TEST_MAIN(TestScreenshot)
#include "test_screenshot.moc"
