package catalog

import (
	"slices"
	"testing"
)

// relevanceQueries are phrased as an agent asks for a tool; each lists the
// tools a person reading the four servers' lists would expect. They were
// written before the ranking existed and are not tuned to it.
var relevanceQueries = []struct {
	query  string
	expect []string
}{
	{"simple text", []string{"es_test_simple_text"}},
	{"read a file", []string{"fs_read_text_file", "fs_read_file", "gh_get_file_contents"}},
	{"create a pull request", []string{"gh_create_pull_request"}},
	{"list open issues", []string{"gh_list_issues", "gh_search_issues"}},
	{"add two numbers", []string{"ts_get-sum"}},
	{"echo a message back", []string{"ts_echo"}},
	{"write content to a file", []string{"fs_write_file", "gh_create_or_update_file"}},
	{"make a new directory", []string{"fs_create_directory"}},
	{"list files in a directory", []string{"fs_list_directory", "fs_list_directory_with_sizes"}},
	{"rename a file", []string{"fs_move_file"}},
	{"search for files matching a pattern", []string{"fs_search_files"}},
	{"get file metadata like size and modification time", []string{"fs_get_file_info"}},
	{"merge a pull request", []string{"gh_merge_pull_request"}},
	{"comment on an issue", []string{"gh_add_issue_comment"}},
	{"create a new branch", []string{"gh_create_branch"}},
	{"list commits in a repository", []string{"gh_list_commits"}},
	{"fork a repository", []string{"gh_fork_repository"}},
	{"search code across GitHub", []string{"gh_search_code"}},
	{"get workflow run logs", []string{"gh_get_job_logs", "gh_actions_get"}},
	{"trigger a GitHub Actions workflow", []string{"gh_actions_run_trigger"}},
	{"star a repository", []string{"gh_star_repository"}},
	{"list my notifications", []string{"gh_list_notifications"}},
	{"who am I, the authenticated user", []string{"gh_get_me"}},
	{"submit a review on a pull request", []string{"gh_pull_request_review_write"}},
	{"return an image", []string{"es_test_image_content", "ts_get-tiny-image"}},
	{"report progress during a long operation", []string{"es_test_tool_with_progress", "ts_trigger-long-running-operation"}},
	{"ask the user for input", []string{"es_test_elicitation"}},
	{"request an LLM completion from the client", []string{"es_test_sampling", "es_test_input_required_result_sampling"}},
	{"show environment variables", []string{"ts_get-env"}},
	{"compress a file with gzip", []string{"ts_gzip-file-as-resource"}},
	{"edit lines in a text file", []string{"fs_edit_file"}},
	{"list releases", []string{"gh_list_releases", "gh_get_latest_release"}},
	{"dependabot security alerts", []string{"gh_list_dependabot_alerts", "gh_get_dependabot_alert"}},
	{"emit log messages", []string{"es_test_tool_with_logging", "es_test_logging_tool", "ts_toggle-simulated-logging"}},
	{"show the directory tree recursively", []string{"fs_directory_tree"}},
	{"create a gist", []string{"gh_create_gist"}},
	{"search for users", []string{"gh_search_users"}},
	{"push several files in one commit", []string{"gh_push_files"}},
	{"delete a file from a repository", []string{"gh_delete_file"}},
	{"read several files at once", []string{"fs_read_multiple_files"}},
	{"structured content with an output schema", []string{"ts_get-structured-content"}},
	{"which directories am I allowed to access", []string{"fs_list_allowed_directories"}},
	{"error handling", []string{"es_test_error_handling"}},
	{"audio content", []string{"es_test_audio_content"}},
}

// TestRelevance is the measure of the ranking: over the merged lists of
// four real servers (141 tools), the share of expected tools found in the
// first five, averaged over the queries, is at least 0.9. (The issue's own
// case, "simple text", is also TestToolsThroughGoSDK's.)
func TestRelevance(t *testing.T) {
	ix := Build(mergedFixtures(t))
	var sum float64
	for _, q := range relevanceQueries {
		got := names(t, ix.Find(q.query, 5))
		found := 0
		for _, want := range q.expect {
			if slices.Contains(got, want) {
				found++
			} else {
				t.Logf("miss: %q: %s not in %v", q.query, want, got)
			}
		}
		sum += float64(found) / float64(len(q.expect))
	}
	recall := sum / float64(len(relevanceQueries))
	t.Logf("recall@5 = %.3f over %d queries and %d tools", recall, len(relevanceQueries), ix.Len())
	if recall < 0.9 {
		t.Errorf("recall@5 = %.3f, want >= 0.9", recall)
	}
}
