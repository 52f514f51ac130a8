package runner_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket/bitbuckettest"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
)

// The commits a restoring push is made of, on the fixtures' push head: keyAdded adds
// secrets/prod.env, keyRemoved removes it, restoringMerge merges keyRemoved into keyAdded taking
// keyAdded's tree ("git merge -s ours").
const (
	keyAdded       = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a01"
	keyRemoved     = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a02"
	restoringMerge = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a03"
)

// A Bitbucket push restoring a forbidden file, end to end, on Bitbucket Cloud and on a Data
// Center server, two ways: main at keyRemoved fast-forwarded to restoringMerge, whose changes
// against its first parent name nothing; main forced from keyRemoved back to keyAdded, a push
// bringing no commit. Either restores secrets/prod.env on main; neither push ever succeeds,
// and each names the key.
func TestABitbucketPushRestoringAForbiddenFileNeverSucceeds(t *testing.T) {
	for _, dc := range []bool{false, true} {
		product := map[bool]string{false: "Bitbucket Cloud", true: "Bitbucket Data Center"}[dc]
		for _, p := range []struct {
			name   string
			head   string
			forced bool
		}{
			{"a merge taking an older tree", restoringMerge, false},
			{"forced back past the removal", keyAdded, true},
		} {
			t.Run(product+", "+p.name, func(t *testing.T) {
				w := newBitbucketWorld(t, dc, history{})
				var event string
				var edit func(string) string
				if dc {
					add := func(id string, parents []string, message string, changes ...bitbucketdctest.Change) {
						w.srvr.AddCommit("PROJ/repository", bitbucketdctest.Commit{ID: id, Parents: parents, Message: message, Changes: changes})
					}
					add(keyAdded, []string{dcHead}, "Add the key\n", bitbucketdctest.Change{Path: "secrets/prod.env", Type: "ADD"})
					add(keyRemoved, []string{keyAdded}, "Remove the key\n", bitbucketdctest.Change{Path: "secrets/prod.env", Type: "DELETE"})
					add(restoringMerge, []string{keyAdded, keyRemoved}, "Merge branch 'master' into restore\n")
					w.srvr.SetBranch("PROJ/repository", "master", p.head)
					event = "repo:refs_changed"
					edit = func(body string) string {
						return strings.NewReplacer(dcBefore, keyRemoved, dcHead, p.head).Replace(body)
					}
				} else {
					add := func(hash string, parents []string, message string, changes ...bitbuckettest.Change) {
						w.cloud.AddHistory("team/app", bitbuckettest.Commit{Hash: hash, Parents: parents, Message: message, Changes: changes})
					}
					add(keyAdded, []string{cloudHead}, "Add the key\n", bitbuckettest.Change{Path: "secrets/prod.env", Status: "added"})
					add(keyRemoved, []string{keyAdded}, "Remove the key\n", bitbuckettest.Change{Path: "secrets/prod.env", Status: "removed"})
					add(restoringMerge, []string{keyAdded, keyRemoved}, "Merge branch 'main' into restore\n")
					w.cloud.SetBranch("team/app", "main", p.head)
					event = "repo:push"
					edit = func(body string) string {
						var v map[string]any
						if err := json.Unmarshal([]byte(body), &v); err != nil {
							t.Fatal(err)
						}
						c := v["push"].(map[string]any)["changes"].([]any)[0].(map[string]any)
						c["old"].(map[string]any)["target"].(map[string]any)["hash"] = keyRemoved
						c["new"].(map[string]any)["target"].(map[string]any)["hash"] = p.head
						c["forced"] = p.forced
						commits := []any{}
						if !p.forced {
							commits = append(commits, map[string]any{"hash": p.head, "type": "commit", "message": "Merge branch 'main' into restore\n"})
						}
						c["commits"] = commits
						b, _ := json.Marshal(v)
						return string(b)
					}
				}
				m := w.deliver(event, time.Time{}, edit)
				w.process(w.runner(config.Rules{ForbiddenPaths: []string{"secrets/**"}}), m)
				if state, desc := w.shown(p.head); state != "FAILED" || !strings.Contains(desc, "forbidden path secrets/prod.env") {
					t.Fatalf("%s %q, want a failure naming secrets/prod.env", state, desc)
				}
			})
		}
	}
}
