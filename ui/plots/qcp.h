// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Include QCustomPlot through this header: qcustomplot.h (2.1) uses Qt's `foreach` in two member templates, which
// QT_NO_FOREACH (set for all of ui/) removes. A range-for stand-in is defined only while the header is parsed.
#ifndef foreach
#define foreach(variable, container) for (variable : container)
#define OPTSCOPE_QCP_FOREACH
#endif
#include <qcustomplot.h>
#ifdef OPTSCOPE_QCP_FOREACH
#undef foreach
#undef OPTSCOPE_QCP_FOREACH
#endif
