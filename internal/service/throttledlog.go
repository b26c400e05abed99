package service

import (
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// throttledLog is a logthrottle.Log: at most one warning per
// logthrottle.Interval, counting the ones held back.
type throttledLog struct{ logthrottle.Log }

// warn is logthrottle.Log.Warn.
func (t *throttledLog) warn(log logrus.FieldLogger, msg string, err error) { t.Warn(log, msg, err) }
