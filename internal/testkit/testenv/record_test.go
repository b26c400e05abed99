package testenv

import "testing"

func TestRun(t *testing.T) {
	tests := []struct {
		name   string
		helper func(testing.TB)
		want   HelperResult
		after  bool // whether the helper goes on after the call
	}{
		{"passes", func(testing.TB) {}, HelperResult{}, true},
		{"Errorf goes on", func(tb testing.TB) { tb.Errorf("bad %d", 1) }, HelperResult{Failed: "bad 1"}, true},
		{"Fatalf stops", func(tb testing.TB) { tb.Fatalf("bad %d", 2) }, HelperResult{Failed: "bad 2"}, false},
		{"Fatal stops", func(tb testing.TB) { tb.Fatal("bad") }, HelperResult{Failed: "bad"}, false},
		{"Skipf stops", func(tb testing.TB) { tb.Skipf("no %s", "redis") }, HelperResult{Skipped: "no redis"}, false},
		{"first failure kept", func(tb testing.TB) { tb.Error("one"); tb.Fatal("two") }, HelperResult{Failed: "one"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := false
			got := RunHelper(t, func(tb testing.TB) { tt.helper(tb); after = true })
			if got != tt.want || after != tt.after {
				t.Errorf("Run = %+v, went on %v; want %+v, %v", got, after, tt.want, tt.after)
			}
		})
	}
}
