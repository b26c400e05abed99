package main

import (
	"strings"
	"testing"
)

// TestHealthFollowsBackendSetting: health follows the backend after start
// only when asked, by SLUICE_HEALTH_FOLLOWS_BACKEND or by the reference's
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION (honoured, so no longer in the list
// of ignored variables); sluice's own setting wins.
func TestHealthFollowsBackendSetting(t *testing.T) {
	redis := []string{"REDIS_URL=127.0.0.1:6379"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     []string
		want    bool
		wantErr string
	}{
		{name: "default: the reference's", want: false},
		{name: "sluice's variable", env: []string{"SLUICE_HEALTH_FOLLOWS_BACKEND=true"}, want: true},
		{name: "the reference's variable", env: append([]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"}, redis...), want: true},
		{name: "the reference's variable off", env: append([]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=false"}, redis...), want: false},
		{name: "sluice's variable wins", env: append([]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true", "SLUICE_HEALTH_FOLLOWS_BACKEND=false"}, redis...), want: false},
		{name: "the flag wins", args: []string{"--health-follows-backend=false"}, env: append([]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"}, redis...), want: false},
		{name: "the reference's variable invalid", env: append([]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=sometimes"}, redis...), wantErr: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseServeCase(t, tc.args, tc.env, tc.wantErr)
			if s == nil {
				return
			}
			if s.HealthFollowsBackend != tc.want {
				t.Errorf("HealthFollowsBackend=%v, want %v", s.HealthFollowsBackend, tc.want)
			}
			for _, v := range s.ignored {
				if strings.HasPrefix(v, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") {
					t.Errorf("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION is listed as ignored")
				}
			}
		})
	}
}
