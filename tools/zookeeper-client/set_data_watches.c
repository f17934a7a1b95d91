
/* zklock (tools/build-zookeeper-client appends this to src/zookeeper.c): several data watches armed
 * by one request. zoo_aset_data_watches sends a SetWatches request, the one the client sends by
 * itself to arm its watches again after a reconnection, for nodes whose state the caller knows as
 * of `relative_zxid`: for each path the server adds a data watch if the node exists and has not
 * changed since then, else it sends the event at once (NodeDeleted for a node that is gone,
 * NodeDataChanged for one changed after `relative_zxid`), before its reply. So the watchers are
 * made active as the request is queued (a getData's are made active by its reply), where such an
 * event finds them; like every active watch they are armed again after a reconnection, until
 * their event or zoo_remove_all_watches. The reply has no body: `completion` gets ZOK once the
 * server took the request. Returns: as zoo_awget (ZBADARGUMENTS: no path, a bad path, no watcher). */
static zk_hashtable *zklock_active_data_watchers(zhandle_t *zh, int rc)
{
    (void)rc;
    return zh->active_node_watchers;
}

int zoo_aset_data_watches(zhandle_t *zh, int64_t relative_zxid, int count, const char *const *paths,
        watcher_fn watcher, void *const *contexts, void_completion_t completion, const void *data)
{
    struct oarchive *oa;
    struct RequestHeader h = {get_xid(), ZOO_SETWATCHES_OP};
    struct SetWatches req;
    char **server_paths;
    int rc = ZOK;
    int i;

    if (zh == 0 || count <= 0 || paths == 0 || watcher == 0)
        return ZBADARGUMENTS;
    if (is_unrecoverable(zh))
        return ZINVALIDSTATE;
    server_paths = calloc(count, sizeof(char *));
    if (!server_paths)
        return ZSYSTEMERROR;
    for (i = 0; i < count && rc == ZOK; ++i) {
        server_paths[i] = prepend_string(zh, paths[i]);
        if (!server_paths[i] || !isValidPath(server_paths[i], 0))
            rc = ZBADARGUMENTS;
    }
    if (rc == ZOK) {
        req.relativeZxid = relative_zxid;
        req.dataWatches.count = count;
        req.dataWatches.data = server_paths;
        req.existWatches.count = 0;
        req.existWatches.data = 0;
        req.childWatches.count = 0;
        req.childWatches.data = 0;
        oa = create_buffer_oarchive();
        rc = serialize_RequestHeader(oa, "header", &h);
        rc = rc < 0 ? rc : serialize_SetWatches(oa, "req", &req);
        enter_critical(zh);
        rc = rc < 0 ? rc : add_void_completion(zh, h.xid, completion, data);
        if (rc >= 0) {
            lock_watchers(zh);
            for (i = 0; i < count; ++i) {
                watcher_registration_t reg = {watcher, contexts ? contexts[i] : 0, zklock_active_data_watchers,
                                              server_paths[i]};
                activateWatcher(zh, &reg, ZOK);
            }
            unlock_watchers(zh);
        }
        rc = rc < 0 ? rc : queue_buffer_bytes(&zh->to_send, get_buffer(oa), get_buffer_len(oa));
        leave_critical(zh);
        close_buffer_oarchive(&oa, 0);
    }
    for (i = 0; i < count; ++i)
        if (server_paths[i])
            free_duplicate_path(server_paths[i], paths[i]);
    free(server_paths);
    if (rc == ZBADARGUMENTS)
        return rc;
    return nonblocking_send(zh, rc);
}
