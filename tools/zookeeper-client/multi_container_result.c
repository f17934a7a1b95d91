
/* zklock (tools/build-zookeeper-client appends this to src/zookeeper.c): the result of a container's
 * create in a transaction, which the server answers with the node's stat as well as its path: the
 * path as op_result_string_completion copies it, and the stat where the caller's result points
 * (zoo_op_result_t::stat, set before zoo_amulti; not touched if null). */
static void zklock_op_result_string_stat_completion(int err, const char *value, const struct Stat *stat,
        const void *data)
{
    struct zoo_op_result *result = (struct zoo_op_result *)data;
    op_result_string_completion(err, value, data);
    if (result->stat && stat && err == ZOK)
        *result->stat = *stat;
}
