
/* zklock (tools/build-zookeeper-client inserts this into generated/zookeeper.jute.c, before the
 * listing responses, and has their deserialize and deallocate functions call it): a listing's
 * names in one allocation, the array of pointers followed by the names, where
 * deserialize_String_vector makes one allocation per name (a thousand for a queue of a thousand,
 * freed again as soon as the completion has run, on every wake-up of a waiter behind them). A
 * listing that does not fit the reply gives no names (count 0), where deserialize_String_vector
 * would leave the names it could not read null. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

/* recordio.c's input buffer; tools/build-zookeeper-client checks that it is still declared so */
struct zklock_buff_struct {
    int32_t len;
    int32_t off;
    char *buffer;
};

/* Returns: the name length written at `off` of `b` (4 bytes there, big-endian), in host order. */
static int32_t zklock_name_length(const struct zklock_buff_struct *b, int32_t off)
{
    uint32_t raw;
    memcpy(&raw, b->buffer + off, sizeof(raw));
    return (int32_t)ntohl(raw);
}

static int zklock_deserialize_names(struct iarchive *in, const char *tag, struct String_vector *v)
{
    struct zklock_buff_struct *b = in->priv;
    int32_t count = 0;
    int32_t i;
    int32_t off;
    size_t bytes = 0;
    char **data;
    char *text;
    int rc = in->start_vector(in, tag, &count);

    v->count = 0;
    v->data = 0;
    if (rc != 0)
        return rc;
    if (count <= 0) /* none listed (or -1: no vector) */
        return in->end_vector(in, tag);
    /* first pass: every name's length, checked against what the reply holds */
    off = b->off;
    for (i = 0; i < count; i++) {
        int32_t len;
        if (b->len - off < 4)
            return -E2BIG;
        len = zklock_name_length(b, off);
        off += 4;
        if (len < 0)
            return -EINVAL;
        if (b->len - off < len)
            return -E2BIG;
        off += len;
        bytes += (size_t)len + 1;
    }
    data = malloc((size_t)count * sizeof(*data) + bytes);
    if (!data)
        return -ENOMEM;
    text = (char *)(data + count);
    for (i = 0; i < count; i++) {
        int32_t len = zklock_name_length(b, b->off);
        b->off += 4;
        memcpy(text, b->buffer + b->off, (size_t)len);
        text[len] = '\0';
        data[i] = text;
        text += len + 1;
        b->off += len;
    }
    v->count = count;
    v->data = data;
    return in->end_vector(in, tag);
}

static void zklock_deallocate_names(struct String_vector *v)
{
    free(v->data);
    v->data = 0;
    v->count = 0;
}

