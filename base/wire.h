/*
 * wire.h - the incmoe wire protocol, documented in this one place.
 *
 * Every message is one UCX active message (id INCMOE_AM_ID) whose user header
 * is exactly one struct inc_wire_hdr and whose data is the payload
 * (hdr.length bytes).  Both ends validate every header with
 * inc_wire_hdr_check() before acting on it.
 *
 * Connection (client -> switch).  Before any of this the rank ran the
 * bootstrap handshake on the switch's TCP port (base/bootstrap.h): both sides
 * proved the key, swapped UCX worker addresses, and the rank got a single-use
 * session token.  The switch takes UCX messages only from endpoints a JOIN
 * bound to such a session.
 *   JOIN       payload: struct inc_wire_join (with the session token) + the
 *              UCX worker address where the other ranks reach this rank (or
 *              empty).  The key itself never crosses the wire.
 *   JOIN_ACK   switch -> every rank once all N joined.  payload: struct
 *              inc_wire_join_ack (the job's liveness timeout and its peer
 *              token among its fields) + N address records (length-prefixed).
 *   ERROR      either direction.  status in hdr.status, the failing rank in
 *              hdr.rank, payload: a NUL-terminated human-readable reason.
 *              After an ERROR from the switch the job is gone.
 *   HEARTBEAT  either direction, no payload; any message proves liveness.
 *              Both ends send one after a quarter of the job's timeout
 *              without other traffic, and give a peer up after a whole
 *              timeout of silence.  The switch owns the timeout: its own
 *              --timeout-ms is the floor, a rank may ask a longer one in
 *              JOIN, the job takes the largest asked, and JOIN_ACK announces
 *              it to every rank.
 *   LEAVE      client -> switch: orderly goodbye, the rank owes nothing more.
 *   SHRINK     client -> switch, no payload, on the connection of the job it
 *              names (hdr.job, hdr.rank: the old job and the sender's rank
 *              in it), also after that job failed: this rank asks to go on
 *              without the ranks the job lost (incmoe_comm_shrink).  The
 *              switch's first SHRINK of a job starts the shrink; it ends once
 *              every member whose connection lives asked.  Only on one
 *              switch: a job over a switch tree is answered
 *              INCMOE_ERR_UNSUPPORTED.
 *   SHRINK_ACK switch -> each rank that asked, hdr.job the old job.  payload:
 *              struct inc_wire_shrink_ack (base/shrink_wire.h checks it).
 *              status 0: the new job's id, this rank's number in it (the
 *              askers renumbered densely in ascending old rank order) and
 *              its size; the ranks then JOIN that job as any job.  status
 *              not 0: the shrink failed for good (a member lost after it
 *              asked and before the answer, the job's timeout passed with
 *              members that never asked, a sender that is not a member);
 *              reason says why, and every asker hears it.  A member lost
 *              without asking is left out.  A JOIN naming a job that was shrunk
 *              (of the last INC_SHRUNK_IDS the switch remembers) is refused.
 *
 * Collectives (hdr.stream, hdr.epoch name one collective of a job):
 *   POST       client -> switch, one per rank and collective, no payload:
 *              hdr.total = bytes this rank owns in the window (AllGather,
 *              ReduceScatter) or bytes of the vector (AllReduce), hdr.sig =
 *              signature of the collective's description (kind, dtype, op,
 *              every rank's byte count).  The switch forwards data of a
 *              collective only after every rank posted it, so a receiver always
 *              knows where the data goes.  For the barrier stream POST is the
 *              whole protocol: the switch answers DONE when all N posted.
 *   DATA       client -> switch, one chunk of a contribution.  hdr.root = the
 *              rank whose window the chunk belongs to, hdr.offset/length =
 *              byte range of the chunk inside that window, hdr.total = window
 *              length, hdr.chunk = offset / chunk_size.  AllGather: root is
 *              the sender.  ReduceScatter: root is any other rank.
 *              AllReduce: root is unused (0).  Consumes one credit of the
 *              stream.
 *   FWD        switch -> client, the result for one chunk: the multicast
 *              block chunk (AllGather), the reduction of the N-1 others'
 *              partials (ReduceScatter, sent to the root only) or of all N
 *              (AllReduce, sent to everyone).  Same root/offset/length/total.
 *   CREDIT     switch -> client: hdr.length = number of credits of hdr.stream
 *              returned (the switch freed that many of the rank's chunks); in
 *              a tree also child -> parent (its window, "Switch trees").
 *   DONE       switch -> client: the barrier of hdr.epoch is complete.
 *
 * Small collectives (one message each way per rank).  A collective is small
 * when inc_wire_is_small() says so from its description alone, so every rank
 * decides alike: ReduceScatter when the sum of all N windows (every rank's
 * byte count) is at most chunk_size, AllGather when it is at most
 * chunk_size / 2 (the switch keeps the blocks twice, see SMALL_FWD),
 * AllReduce when the vector is at most chunk_size.  Then every rank's whole
 * contribution and every result fits one chunk.
 * A small collective uses SMALL / SMALL_FWD instead of POST, DATA, FWD and
 * CREDIT; a rank sending POST or DATA for a collective another rank sent as
 * SMALL (or the reverse) fails the job with INCMOE_ERR_MISMATCH.
 *   SMALL      client -> switch: POST and every contribution of this rank in
 *              one message, consuming one credit of the stream.  Header as
 *              POST (total = this rank's window, AllReduce: the vector; sig,
 *              dtype, redop), root/offset/chunk 0, length = payload bytes.
 *              payload: uint64 sizes[N] (every rank's window, as in the
 *              signature; AllReduce: N times the vector), then the data:
 *              AllGather: this rank's block (sizes[rank] bytes);
 *              ReduceScatter: its partial for every other root r, ascending
 *              r, sizes[r] bytes each; AllReduce: its vector.  The switch
 *              checks the table against the header, the signature, the other
 *              ranks' tables and the small rule, and the payload length.
 *   SMALL_FWD  switch -> client, once all N sent SMALL: everything this rank
 *              receives, and its credit back (no CREDIT follows).  total =
 *              length = payload bytes.  AllGather: the N-1 other blocks in
 *              the order rank+1, ..., N-1, 0, ..., rank-1 (so the switch
 *              sends every rank a slice of one buffer holding the blocks
 *              twice); ReduceScatter: the reduction (ascending rank order) of
 *              the N-1 others' partials of this rank's block, which the rank
 *              adds to its own; AllReduce: the reduced vector.
 *
 * Dispatch and combine (incmoe.h, "Dispatch and combine"; the streams
 * INCMOE_STREAM_DISPATCH and INCMOE_STREAM_COMBINE).  Rows are counted in
 * rows, not bytes, in offset and total below.  W = INCMOE_SET_WORDS(N); a
 * set is W uint64 words, bit r % 64 of word r / 64 naming rank r.  A row of
 * rank s is a network row when its set holds a rank other than s: only those
 * cross the network (a row whose set holds s itself is copied locally).
 * rows_per_chunk = inc_wire_dc_rows_per_chunk(row bytes, N, chunk_size), the
 * same for both streams with their own row bytes; chunk c of rank s covers
 * its source rows [c * rows_per_chunk, +k), k = min(rows_per_chunk, T_s -
 * c * rows_per_chunk).
 *   POST       as above, with a payload: struct inc_wire_dc_post, then uint32
 *              count[N] (dispatch: its rows whose set holds d; combine: that
 *              of its dispatch), and for combine uint32 recvd[N] (the rows it
 *              received from each s, i.e. the partials it gives), then the
 *              reason of a refusal (incmoe.h, "A refusal"), refused bytes, no
 *              NUL: such a POST has no rows and the plan fails with it.  total
 *              = T of this rank, sig = the stream's signature (shapes are the
 *              plan's to compare).  Consumes one credit, which PLAN returns.
 *   PLAN       switch -> every rank once all N posted: payload struct
 *              inc_wire_dc_plan (the verdict of base/dc_plan.h, the same for
 *              every rank: status, the rank at fault, the reason), then for a
 *              dispatch uint32 col[N], the rows this rank receives from each
 *              source.  A rank sends its DATA only after its PLAN said OK; a
 *              failed verdict ends the collective on every rank, nothing
 *              written, the communicator intact.  So a rank never completes a
 *              dispatch or combine before every rank posted it: these streams
 *              have no epoch gap (see "Epoch window").
 *   DATA       dispatch, rank s: root = s, chunk = c, offset = its first
 *              source row, total = T_s; payload: the k sets of the chunk
 *              (8 W k bytes), then its network rows in row order.  The switch
 *              takes a source's chunks in chunk order; for each d != s that
 *              some set holds it sends FWD with the rows for d.
 *              combine, owner s (root = s = sender): its set chunk: chunk c
 *              of its dispatch rows' sets (8 W k bytes), offset and total as
 *              for dispatch, every chunk sent.  combine, contributor d (root =
 *              owner s != d): its partials of the rows of s's chunk c whose
 *              set holds d, in row order; offset = c * rows_per_chunk, total =
 *              the rows d received from s; never empty.  dtype/redop: the
 *              combine's.  Each consumes one credit (CREDIT returns it).
 *   FWD        dispatch, to d: root = s, chunk = c, offset = rows of s already
 *              sent to d (the position in d's block of s), total = count[s][d];
 *              payload: uint32 source row of each, then the rows (4 + row
 *              bytes each).  combine, to owner s: root = s, chunk = c, offset
 *              = c * rows_per_chunk, total = T_s; payload: the reduction (in
 *              ascending rank order) of the other contributors' partials of
 *              each row of the chunk that has one, in row order; the owner
 *              applies its own partial last.
 *   SMALL      a rank whose whole contribution is small (inc_wire_dc_is_small:
 *              its pieces, headers and padding included, take at most a
 *              chunk) sends its POST and every DATA of the collective in one
 *              message: payload as POST's, then per DATA a struct
 *              inc_wire_dc_piece and its bytes padded to 8.  One credit, returned by CREDIT once
 * every piece went (its PLAN returns none).  The switch takes each piece as the DATA it stands for
 * once the plan is OK, so ranks may mix the two forms.
 *
 * Between the ranks (no switch in the data path): each rank creates an
 * endpoint to every rank it sends to (mesh.c: the ring's right neighbour, or
 * every other rank) from the worker addresses of JOIN_ACK.
 *   PEER_HELLO   the first message on every such endpoint, which also finishes
 *                UCX wire-up before bulk data; payload: the job's peer token
 *                from JOIN_ACK (ring_token), hdr.rank the sender.  A rank takes
 *                messages between the ranks only from an endpoint whose HELLO
 *                showed the job's token, and takes that endpoint's messages as
 *                the HELLO's rank's, whatever their headers say.
 *
 * Ring baseline (rank -> right neighbour; ring.c, and a2a.c's AllGather,
 * ReduceScatter and AllReduce):
 *   RING_REDUCE  a chunk of a running partial sum of block hdr.root (ReduceScatter,
 *                and AllReduce's first phase); the receiver adds its own partial
 *                and passes it on, or keeps it if the block is its own.
 *   RING_GATHER  a chunk of block hdr.root (AllGather, AllReduce's second phase);
 *                the receiver stores it and passes it on unless it is the last.
 *   Same root/offset/length/total/chunk/dtype/redop fields as DATA.
 *
 * Dispatch and combine between the ranks (the ring and a2a algorithms;
 * dc_peer.c), every message on the mesh.  Rows are counted in rows, not
 * bytes, in offset and total; length is payload bytes.
 *   PEER_PLAN      every rank to every other, once per dispatch or combine,
 *                  whether or not rows go between them: payload struct
 *                  inc_wire_dc_post, then uint32 count[N] (dispatch: its rows
 *                  whose set holds d; combine: that row of its dispatch), then
 *                  for a dispatch uint32 rows[count[receiver]], the source rows
 *                  the receiver gets, ascending; for a combine uint32 recvd[N]
 *                  (the partials it gives each owner).  Every rank computes the
 *                  same verdict (base/dc_plan.h) from the N plans; rows move
 *                  only after an OK one.
 *   PEER_ROWS      dispatch, source -> receiver: rows of the source's for the
 *                  receiver, in order; offset = how many it sent the receiver
 *                  before (their position in the receiver's block of that
 *                  source), total = count[receiver], chunk = the message's
 *                  index; at most max(1, chunk_size / row bytes) rows.
 *   PEER_PARTIALS  combine, contributor -> owner (root): its partials of the
 *                  owner's rows of owner chunk `chunk` (rows [chunk * k, +k),
 *                  k = max(1, chunk_size / partial row bytes)), in row order;
 *                  offset = the partials it sent the owner before, total = the
 *                  rows it received from the owner; dtype/redop the combine's.
 *                  Never empty; each consumes one of the contributor's
 *                  credits toward that owner (JOIN_ACK's credits, for the
 *                  stream), so an owner stages at most N - 1 times credits
 *                  chunks.
 *   PEER_CREDIT    owner -> contributor (combine), receiver -> sender (a low-latency
 *                  dispatch, see PEER_LL): length = credits returned
 *                  (the owner reduced the chunks they held).
 *
 * Flow control: JOIN_ACK grants every rank `credits` chunks of `chunk_size`
 * bytes per data stream.  A DATA message consumes one; the switch returns it
 * when it has freed the buffer.  A rank that exceeds its credits is a
 * protocol error.  So the switch holds at most N * streams * credits *
 * chunk_size bytes of contributions per job.  Ranks send the chunks of one
 * stream in one global order (epoch, chunk, root), which makes the credit
 * scheme deadlock-free: the first incomplete chunk always has every
 * contributor able to send it.
 *
 * Epoch window: a rank has at most INCMOE_STREAM_WINDOW collectives of one
 * stream posted and not yet completed (the client waits, or with the NCCL
 * plugin answers "no request yet", before posting more).  The switch keeps a
 * stream's collectives open from the oldest it has not finished up to
 * INCMOE_WIRE_OPEN_EPOCHS ahead and fails the job on an epoch beyond that.
 * A rank posting epoch e has completed e - W, which needed every rank to
 * post e - W, so each of them had completed e - 2W: the switch sees epochs
 * at most 2W ahead of the slowest rank's completions, and the other 2W of
 * its window absorb the sends whose completion it has not yet seen.  (A
 * collective in which a rank receives nothing completes without the others;
 * only such a rank can run further ahead.  Dispatch and combine close that
 * gap: every rank waits for its PLAN, which needs every rank's POST.)
 *
 * Progress: a collective that some ranks posted and another live rank has not
 * posted within the job's progress timeout fails the job with
 * INCMOE_ERR_TIMEOUT and a reason naming the ranks that did not post.  The
 * job's progress timeout is the largest its ranks asked in JOIN, else the
 * switch's --progress-timeout-ms.
 *
 * Switch trees (a switch started with --parent; switch/tree_join.c, tree.c).  A switch's
 * ports are its ranks, its child switches and, below the root, its parent; a
 * port covers a rank it is, every rank beneath a child, and for the parent
 * every rank not beneath this switch.  A port's key is the lowest rank it
 * covers.  Between two switches the child speaks as a rank speaks to it, for
 * the ranks it covers, with hdr.rank = its key at the parent; the parent
 * answers as a switch answers a rank.
 *   TREE_JOIN  child -> parent: ranks that joined the job below the child,
 *              payload struct inc_wire_tree_join and count address records.
 *              The first on a new connection carries its bootstrap session's
 *              token, as JOIN does; later ones add ranks while the job forms.
 *              The root answers every port with JOIN_ACK once all N joined;
 *              a child relays it to its own ports with its own credits, the
 *              root's chunk size, timeout and ring token.
 *   TREE_POST  either way between two switches, header as POST: every rank
 *              on the sender's side of the link posted the collective.
 *              payload: uint64 bytes[N], the windows of the ranks the sender's
 *              side covers (the others 0).  A switch sends it toward a switch
 *              port once every rank the port does not cover has posted, so
 *              every switch sees every rank's POST, and the barrier needs no
 *              other message between switches.
 *   Data follows the ports: an AllGather block goes from the port covering its
 *   root to every other port; a ReduceScatter block's partials come from every
 *   port but the one covering the root, are reduced in ascending key order and
 *   go to that port (the switch where the root is a rank port ends the chain:
 *   the root adds its own partial last); an AllReduce is reduced up (each
 *   switch over its ports but the parent, ascending key) and the root's result
 *   goes down unchanged.  A child sends DATA up under the credits its parent's
 *   JOIN_ACK granted and gets FWD, CREDIT and SMALL_FWD down.  A FWD down of
 *   an AllGather block, an AllReduce result or a dispatch chunk takes one of
 *   the window the child's TREE_JOIN announced, per stream: the child answers
 *   each with a CREDIT (hdr.rank its key, length 1) once it has gone on, so
 *   the child holds at most window such chunks per stream.  A ReduceScatter
 *   partial down takes one of that window of its owner (hdr.root), per owner,
 *   sent in (epoch, chunk) order; its CREDIT names the owner in hdr.root.  A
 *   combine set chunk between switches, either way, takes one of a window of
 *   its owner (hdr.root) on that link, the size the child's TREE_JOIN
 *   announced: the receiver answers it with a CREDIT on the combine stream
 *   (hdr.rank its key, hdr.root the owner, length 1) once its item of that
 *   chunk is done, and fails the job when a peer sends an owner more than
 *   the window; a switch sends an owner's set chunks in (epoch, chunk) order,
 *   a combine's only once every earlier combine finished there
 *   (switch/dc_window.c).  The combine's partials between switches take
 *   neither: each answers a set chunk the receiver sent.  A
 *   SMALL_FWD answers the child's own SMALL, which took a credit; a SMALL between
 *   switches carries the sender side's contribution in the same layouts as a
 *   rank's, over the ranks it covers (AllGather: their blocks, ascending rank;
 *   ReduceScatter: its reduced partial of every root it does not cover,
 *   ascending root; AllReduce: its reduced vector), and SMALL_FWD to a child
 *   switch carries what its ports lack (AllGather: the other blocks, ascending
 *   rank; ReduceScatter: the partial of every root it covers, ascending root;
 *   AllReduce: the vector).
 *   Dispatch and combine (switch/dc_form.c) run on the same ports.  Every switch
 *   keeps every rank's plan fields: a switch relays each POST it gets (from a
 *   rank, or from a switch port; for a SMALL, its plan fields as a POST)
 *   unchanged, hdr.rank the rank's, to every switch port but the one it came
 *   from, before anything else of the collective, so each switch gets each
 *   once, makes the verdict of base/dc_plan.h itself (the same everywhere)
 *   and sends PLAN to its own ranks only; a switch port may relay a POST only
 *   of a rank it covers.  A rank's SMALL is taken piece by piece at its
 *   switch; between switches only POST and the chunks below go.  A chunk of
 *   root s between switches is laid out as s's DATA (root = s, chunk = c,
 *   offset = first source row, total = T_s; up: DATA, hdr.rank the sender's
 *   key; down: FWD, hdr.rank the child's key):
 *   dispatch: every set of the chunk, then the rows whose set names a rank on
 *     the receiving side, in row order.  A switch takes a root's chunks in
 *     chunk order from the port covering the root; the rows that came with a
 *     chunk from port q are those whose set names a rank q does not cover (from
 *     rank s: its network rows).  It sends each rank port FWD as on one switch
 *     (offset and total from the count[s][d] of the POSTs, which every switch
 *     has), and each other switch port whose side the sets name the chunk with
 *     that side's rows, the root's last chunk (perhaps with no row) to every
 *     other switch port: a switch knows a root is done when its last chunk
 *     came.  Up it takes the parent's credits, as a rank's DATA does at its
 *     switch; down the child's window.
 *   combine, the owner's set chunk: its k sets, taken in chunk order from the
 *     port covering the owner and sent on like a dispatch chunk without rows.
 *   combine, a partial: offset and total as the set chunk's, dtype/redop the
 *     combine's; the rows of the owner's chunk whose set names a rank on the
 *     sender's side, in row order, each the sender's reduction of them.  Item
 *     (s, c) of a switch expects one from every port but the one covering s
 *     whose side the sets name (a rank d: its partials of the rows whose set
 *     holds d, as on one switch); each row is reduced over the contributions
 *     it has, in ascending port-key order, and the rows that have one go
 *     toward s: to rank s as FWD (s applies its own partial last), to the
 *     switch port covering s as a partial, which that switch takes as the
 *     contribution of the port it came from.  The combine's messages between
 *     switches take no credits (see job_dc_memory_bound in
 *     switch/membership.c: a child's credits at its parent are shared by the
 *     owners beneath it, and an owner's item waiting there for another port
 *     could hold the credit that port's set chunk needs).
 *   So a combined row of owner s whose set is S is, at s's switch, the fold
 *   in ascending key order over its ports but s's whose side meets S, a switch
 *   port bringing the same fold of its own switch over its ports but the one
 *   toward s; then s's own partial last if S holds s.  That is
 *   ReduceScatter's order over a tree, per row, restricted to the ports S
 *   names; on one switch, ascending rank order.
 *
 * The low-latency form of dispatch and combine (incmoe.h, "The low-latency
 * form"): one message up per rank and collective, no POST, no PLAN.  It uses
 * the dispatch and combine streams and their epochs; a collective's first
 * message sets its form (a rank sending POST or SMALL for an epoch another
 * sent LL for, or the reverse, fails the job with INCMOE_ERR_MISMATCH).
 * W = INCMOE_SET_WORDS(N).  Every payload starts with struct inc_wire_ll (the
 * sender's description), then its refusal's reason (`refused` bytes, no NUL)
 * padded to 8; what follows is said per message.  A refused message (status
 * not 0) carries nothing after the reason and rows = 0.  Its nranks is the
 * job's (anything else is malformed).  Headers: offset and chunk 0, status 0
 * but for an LL_FWD verdict, dtype and redop unused (the struct has them);
 * the switch compares no LL's sig (the descriptions decide) and sends sig 0.
 * base/ll_wire.h lays the payloads out and checks them.
 *   LL         client -> switch, rank s.  total = T_s, sig = the stream's
 *              signature, root 0, length = payload bytes.  Takes max(1, ceil(length /
 *              chunk_size)) credits of its stream, which CREDIT returns once
 *              the switch freed the message; a message that would take more
 *              than the job's credits is never sent: the rank refuses instead
 *              (status INCMOE_ERR_NO_MEMORY).
 *              dispatch: uint64 sets[T x W], then its network rows (set holds a
 *              rank other than s), row_bytes each, in row order.  By expert a
 *              row on the wire is the caller's row, then its topk int32 expert
 *              ids, padded to 8 (row_bytes counts them all); the combine folds
 *              over local experts before it sends, so its partials are by
 *              source.
 *              combine: uint64 sets[T x W] (the sets of its own dispatch, so
 *              the switch knows each row's contributors), uint32 recvd[N]
 *              padded to 8 (the partials it gives each owner: the rows it
 *              received from each in the dispatch; its own entry 0), then for
 *              each owner o != s, ascending, recvd[o] partials of row_bytes, in
 *              the order of its region of o (ascending source row).
 *   LL_FWD     switch -> client.  hdr.status 0:
 *              dispatch, to d, for source s, sent as soon as s's LL arrived
 *              (one per source s != d, rows for d or not): root = s, total = n,
 *              the rows of s whose set holds d; payload: s's struct inc_wire_ll
 *              and reason as s sent them, uint32 src_row[n] padded to 8 (the
 *              source row of each, ascending), then the n rows.  The receiver
 *              checks s's description against its own before writing region
 *              s (a disagreement or a refusal: region s is not written), and
 *              decides once all N - 1 sources are in, every rank alike from
 *              the same N descriptions: the lowest refusing rank's status and
 *              reason, else the first disagreement (max_tokens, row_bytes,
 *              layout, topk, layout_sig), else OK (inc_wire_ll_verdict).
 *              combine, to owner s, once every rank's LL of the combine
 *              arrived and they agree: root = s, total = n, the rows of s whose
 *              set holds a rank other than s; payload: s's struct inc_wire_ll
 *              as s sent it (not refused, so no reason), then the reduction of
 *              each such row over those ranks' partials in ascending rank order
 *              (fp32 accumulation for 16-bit types), in row order; s applies
 *              its own partial last.  Exactly one per rank, n = 0 included.
 *              hdr.status not 0: the switch's verdict, the collective fails on
 *              this rank with that status; root = the receiver, total = 0,
 *              payload: a NUL-terminated reason.
 *              No other LL_FWD of the collective follows.  Sent to every rank
 *              for a combine whose LLs disagree (dtype, redop, row_count,
 *              row_bytes, dispatch_epoch, max_tokens, or a recvd count against
 *              the owner's sets: INCMOE_ERR_MISMATCH) or include a refusal
 *              (the lowest refusing rank's); to a rank of a job over a switch
 *              tree, which the form does not cross yet
 *              (INCMOE_ERR_UNSUPPORTED), for each LL it sends.
 *   PEER_LL    between the ranks (ring, a2a), on the mesh.  dispatch, source s
 *              to every other rank d (rows for d or not): header and payload
 *              as LL_FWD's dispatch above, decided the same way.  combine,
 *              contributor d to every other rank o (partials for o or not):
 *              root = o, total = n = recvd[o]; payload: d's struct and reason,
 *              then n partials in the order of d's region of o; o checks n
 *              against its own sets (a disagreement there fails the job: the
 *              library keeps dispatches, so only a broken peer gets here),
 *              decides from the N descriptions as a dispatch does (dtype,
 *              redop, row_count, row_bytes, dispatch_epoch added), and reduces
 *              as the switch does, its own partial last.  Each takes max(1,
 *              ceil(length / chunk_size)) of the sender's credits toward that
 *              rank and stream (JOIN_ACK's credits), which PEER_CREDIT returns
 *              once the receiver's collective decided (every other rank's
 *              PEER_LL came); a rank sends a collective's PEER_LLs only
 *              while its credits of the stream toward every rank are back
 *              (but those the collective took), and a message that would
 *              take more than credits is never sent (the rank refuses
 *              instead).
 *              PEER_CREDIT, on the PEER_LL's stream, returns them.
 * The switch counts each job's messages per stream and direction (trips) and
 * logs them at info when the job ends, so a test can count a decode step's:
 * per stream that carried any, one line "job ID trips STREAM: in T=n ... out
 * T=n ...", T a message type's name (inc_wire_msg_name) in wire order, n its
 * count, types of count 0 left out; "in": from the job's ranks, "out": to
 * them; only POST, DATA, FWD, CREDIT, DONE, SMALL, SMALL_FWD, PLAN, LL and
 * LL_FWD count (switch/trips.c).
 *
 * Reductions are done in ascending rank order with fp32 accumulation for
 * 16-bit types, so results are bitwise reproducible whatever order the
 * messages arrive in.  The ReduceScatter root adds its own partial last.
 */
#ifndef INC_WIRE_H
#define INC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe.h"

/* How many streams a job has (incmoe_stream_t). */
#define INC_STREAM_COUNT ((int)INCMOE_STREAM_COMBINE + 1)

#define INCMOE_AM_ID           7
#define INCMOE_WIRE_MAGIC      0x4d434e49u /* "INCM" little-endian */
#define INCMOE_WIRE_VERSION    10          /* 10: combine set chunks under a window */
#define INCMOE_WIRE_MAX_ADDR   4096        /* bytes of one rank address in JOIN */
#define INCMOE_WIRE_TOKEN      16          /* bytes of a session or ring token */
#define INCMOE_WIRE_MAX_TEXT   256         /* bytes of an ERROR reason */
#define INCMOE_WIRE_MAX_WINDOW 4096        /* a child switch's window (TREE_JOIN) */
/* Epochs of one stream the switch keeps open per job (see "Epoch window" above). */
#define INCMOE_WIRE_OPEN_EPOCHS (4 * INCMOE_STREAM_WINDOW)

typedef enum {
    WIRE_MSG_JOIN = 1,
    WIRE_MSG_JOIN_ACK,
    WIRE_MSG_ERROR,
    WIRE_MSG_HEARTBEAT,
    WIRE_MSG_LEAVE,
    WIRE_MSG_POST,
    WIRE_MSG_DATA,
    WIRE_MSG_FWD,
    WIRE_MSG_CREDIT,
    WIRE_MSG_DONE,
    WIRE_MSG_PEER_HELLO,
    WIRE_MSG_RING_REDUCE,
    WIRE_MSG_RING_GATHER,
    WIRE_MSG_SMALL,
    WIRE_MSG_SMALL_FWD,
    WIRE_MSG_PLAN,
    WIRE_MSG_PEER_PLAN,
    WIRE_MSG_PEER_ROWS,
    WIRE_MSG_PEER_PARTIALS,
    WIRE_MSG_PEER_CREDIT,
    WIRE_MSG_TREE_JOIN,
    WIRE_MSG_TREE_POST,
    WIRE_MSG_LL,
    WIRE_MSG_LL_FWD,
    WIRE_MSG_PEER_LL,
    WIRE_MSG_SHRINK,
    WIRE_MSG_SHRINK_ACK,
    WIRE_MSG_LAST = WIRE_MSG_SHRINK_ACK
} inc_wire_msg_t;

struct inc_wire_hdr {
    uint32_t magic;   /* INCMOE_WIRE_MAGIC */
    uint16_t version; /* INCMOE_WIRE_VERSION */
    uint8_t msg;      /* inc_wire_msg_t */
    uint8_t stream;   /* incmoe_stream_t (collective messages) */
    uint64_t job;     /* job id */
    uint64_t epoch;   /* collective epoch within the stream, from 1 */
    uint32_t rank;    /* sender rank (client -> switch), failing rank (ERROR) */
    uint32_t root;    /* owner of the window the chunk belongs to */
    uint64_t offset;  /* byte offset of the chunk inside the root's window */
    uint64_t length;  /* payload bytes (or credits, for CREDIT) */
    uint64_t total;   /* bytes of the root's window (or of this rank's, for POST) */
    uint64_t sig;     /* signature of the collective's description */
    uint32_t chunk;   /* offset / chunk_size */
    uint8_t dtype;    /* incmoe_dtype_t */
    uint8_t redop;    /* incmoe_redop_t */
    int16_t status;   /* incmoe_status_t: ERROR, and an LL_FWD verdict */
};

/* Payload of JOIN: fixed part, then addr_len address bytes. */
struct inc_wire_join {
    uint32_t nranks;
    uint32_t addr_len;
    uint32_t timeout_ms;              /* the liveness timeout this rank asks for; 0: the switch's */
    uint32_t progress_timeout_ms;     /* the progress timeout this rank asks for; 0: the switch's */
    uint8_t token[INCMOE_WIRE_TOKEN]; /* the bootstrap session's */
};

/* Payload of JOIN_ACK: fixed part, then nranks x (uint32 length, address bytes). */
struct inc_wire_join_ack {
    uint32_t nranks;
    uint32_t credits;                      /* per rank and data stream */
    uint64_t chunk_size;                   /* bytes of one DATA chunk */
    uint32_t timeout_ms;                   /* the job's liveness timeout (see HEARTBEAT) */
    uint32_t reserved;                     /* 0 */
    uint8_t ring_token[INCMOE_WIRE_TOKEN]; /* random per job: ranks show it in PEER_HELLO */
};

/* Payload of SHRINK_ACK (fixed size). */
struct inc_wire_shrink_ack {
    uint64_t job;                      /* the new job (status 0) */
    uint32_t rank;                     /* the receiver's number in it */
    uint32_t nranks;                   /* its size */
    char reason[INCMOE_WIRE_MAX_TEXT]; /* status not 0: why, NUL-terminated */
};

/* Payload of TREE_JOIN: fixed part, then count x (uint32 rank, uint32 address length, address
   bytes).  Laid out as struct inc_wire_join up to the token, which sits at the same offset. */
struct inc_wire_tree_join {
    uint32_t nranks;
    uint32_t count;               /* ranks this message adds */
    uint32_t timeout_ms;          /* the largest liveness timeout asked below the sender */
    uint32_t progress_timeout_ms; /* the largest progress timeout asked below the sender */
    uint8_t token[INCMOE_WIRE_TOKEN];
    uint32_t window;   /* FWDs of each windowed stream the parent may send ahead, 1..MAX_WINDOW */
    uint32_t reserved; /* 0 */
};

/* What a rank says of a dispatch or combine: the payload of POST (and head of SMALL) on the
   dispatch and combine streams, then uint32 count[nranks], and for combine uint32
   recvd[nranks]; the head of PEER_PLAN, then the arrays of that message (see above). */
struct inc_wire_dc_post {
    uint64_t rows;           /* T: this rank's rows in the dispatch */
    uint64_t row_bytes;      /* dispatch: of a row; combine: of a partial row */
    uint64_t capacity;       /* dispatch: rows it can receive; combine: 0 */
    uint64_t dispatch_epoch; /* combine: the dispatch it inverts; dispatch: 0 */
    uint64_t row_count;      /* combine: elements of a partial row; dispatch: 0 */
    uint32_t nranks;
    uint8_t dtype, redop; /* combine: the partials'; dispatch: 0 */
    uint16_t refused;     /* bytes of the refusal's reason after the counts, at most
                             INCMOE_REFUSAL_MAX - 1; 0: not refused */
};

/* Payload of PLAN: the verdict; then, for a dispatch, uint32 col[nranks]. */
struct inc_wire_dc_plan {
    int32_t status; /* incmoe_status_t: 0, or the failure every rank shares */
    uint32_t rank;  /* the rank at fault */
    uint32_t nranks;
    uint32_t reserved;                 /* 0 */
    char reason[INCMOE_WIRE_MAX_TEXT]; /* NUL-terminated */
};

/* The head of every low-latency message's payload (see "The low-latency form"). */
struct inc_wire_ll {
    uint64_t rows;           /* T of the sender; 0 when refused */
    uint64_t row_bytes;      /* dispatch: of a row on the wire; combine: of a partial row */
    uint64_t max_tokens;     /* the bound on every rank's T */
    uint64_t dispatch_epoch; /* combine: the dispatch it inverts; dispatch: 0 */
    uint64_t row_count;      /* combine: elements of a partial row; dispatch: 0 */
    uint64_t layout_sig;     /* by expert: a hash of num_experts, topk, expert_rank and the
                                caller's row bytes (the ids' offset in a row); else 0 */
    uint32_t nranks;
    int32_t status;       /* 0, or the refusal's: INCMOE_ERR_INVALID_ARG (its arguments) or
                             INCMOE_ERR_NO_MEMORY (over max_tokens, or over the credits) */
    uint8_t dtype, redop; /* combine: the partials'; dispatch: 0 */
    uint8_t layout;       /* 0 by source, 1 by expert */
    uint8_t reserved;     /* 0 */
    uint16_t refused;     /* bytes of the reason after this struct, at most INCMOE_REFUSAL_MAX - 1;
                             0 when status is 0 */
    uint16_t topk;        /* by expert: expert ids each row carries; else 0 */
};

/* One DATA inside a SMALL: the header fields it would have carried, then length bytes
   (padded to a multiple of 8). */
struct inc_wire_dc_piece {
    uint32_t root, chunk;
    uint64_t offset, total, length;
};

/* Fill the constant fields. */
void inc_wire_hdr_init(struct inc_wire_hdr *hdr, inc_wire_msg_t msg, uint64_t job);

/*
 * Check a received header: size, magic, version, message type, and the
 * fields each message type needs in range.  Returns INCMOE_OK or an error
 * with a reason written to why (which may be NULL).
 */
incmoe_status_t inc_wire_hdr_check(const void *header, size_t header_length, size_t payload_length,
                                   char *why, size_t why_len);

/* Writes why a message is malformed to why (when not NULL), as snprintf; returns
   INCMOE_ERR_PROTOCOL, so a check can end with `return inc_wire_reject(...)`. */
incmoe_status_t inc_wire_reject(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *inc_wire_msg_name(unsigned msg);
const char *inc_wire_stream_name(unsigned stream);

/* Signature of a collective's description; equal on every rank that agrees. */
uint64_t inc_wire_signature(incmoe_stream_t stream, incmoe_dtype_t dtype, incmoe_redop_t op,
                            const uint64_t *bytes, int nranks);

/* Does a collective take the small form (see "Small collectives" above)?  bytes[] as in
   inc_wire_signature(); never for the barrier or a single rank. */
int inc_wire_is_small(incmoe_stream_t stream, const uint64_t *bytes, int nranks,
                      uint64_t chunk_size);

/* Bytes of a SMALL message's payload from its table: 8 N + this rank's contribution. */
uint64_t inc_wire_small_length(incmoe_stream_t stream, const uint64_t *bytes, int nranks, int rank);

/* Bytes of the SMALL_FWD payload rank receives: the others' blocks (AllGather), its own
   window (ReduceScatter) or the vector (AllReduce). */
uint64_t inc_wire_small_result_length(incmoe_stream_t stream, const uint64_t *bytes, int nranks,
                                      int rank);

/* Is the stream dispatch or combine? */
int inc_wire_is_dc(unsigned stream);
/* Rows of one dispatch or combine chunk (see "Dispatch and combine"): max(1, chunk_size /
   (row_bytes + 8 W)), row_bytes > 0. */
uint64_t inc_wire_dc_rows_per_chunk(uint64_t row_bytes, int nranks, uint64_t chunk_size);
/* Bytes of a POST payload of the stream for nranks ranks, refused bytes of a refusal's reason
   included. */
uint64_t inc_wire_dc_post_length(incmoe_stream_t stream, int nranks, unsigned refused);
/* Bytes of the plan fields at the head of a POST or SMALL payload of length bytes, the
   refusal's reason its refused field announces included (at least the struct's size): the
   pieces of a SMALL start there. */
uint64_t inc_wire_dc_fields_length(incmoe_stream_t stream, int nranks, const void *payload,
                                   uint64_t length);
/* May a contribution whose pieces (after the plan fields of the SMALL) take this many bytes
   go as one SMALL: at most a chunk. */
int inc_wire_dc_is_small(uint64_t pieces_length, uint64_t chunk_size);
/* A piece's bytes in a SMALL: its header and its data padded to 8. */
uint64_t inc_wire_dc_piece_length(uint64_t length);

#endif
