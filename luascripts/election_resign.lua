-- election_resign.lua (+ core.lua, lib.lua, lib_election.lua, and release.lua's body as the
--   function release_body): the announced leader resigns and gives the election's lock back, in one
--   step: the `resigned` entry and the hand-off to the next candidate (see promote in lib.lua).
--   KEYS as release.lua's (KEYS[1..9]), then KEYS[10] = leader, KEYS[11] = log (see
--   lib_election.lua); ARGV as release.lua's (ARGV[7..10] = [lease, idem_ms, which, here], here
--   always '': this reply has no room for hand-overs, so a candidate confirms its hand-off), then
--   ARGV[11..13] = [maxlen, retention_ms, maxbytes]
--   => release.lua's reply, then the id of the `resigned` entry ('' when none was written: the lease
--   was not the announced leader, e.g. a retry, or a grant given back before its announcement), then
--   the types of the entries appended, space-separated: a leader announced before that no longer
--   holds is announced `vacant` on the way.
el_lock, el_leader, el_log, el_maxlen, el_maxbytes, el_retention = KEYS[1], KEYS[10], KEYS[11], ARGV[11], ARGV[13], ARGV[12]

local resigned = ''
local cur = el_leader_now()
if cur and cur.lease == ARGV[7] then
  resigned = el_resign(cur)
end
local reply = release_body()
reply[#reply + 1] = resigned
reply[#reply + 1] = table.concat(el_appended, ' ')
return reply
