// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Shared set-up of the GUI tests: offscreen platform (set by CTest), 96 DPI, one fixed font, QSettings in test mode.

#include <QApplication>
#include <QFont>
#include <QStandardPaths>
#include <QString>
#include <QTest>

#define OPTSCOPE_GUI_TEST_MAIN(TestClass)                                                                              \
    int main(int argc, char** argv)                                                                                    \
    {                                                                                                                  \
        QApplication::setAttribute(Qt::AA_Use96Dpi);                                                                   \
        QApplication app(argc, argv);                                                                                  \
        QApplication::setOrganizationName(QStringLiteral("OptScopeTests"));                                            \
        QApplication::setApplicationName(QStringLiteral(#TestClass));                                                  \
        QApplication::setFont(QFont(QStringLiteral("DejaVu Sans"), 9));                                                \
        QStandardPaths::setTestModeEnabled(true);                                                                      \
        TestClass test;                                                                                                \
        return QTest::qExec(&test, argc, argv);                                                                        \
    }

inline QString testData(const char* name)
{
    return QStringLiteral(OPTSCOPE_TEST_DATA "/") + QLatin1String(name);
}
