/*
 * fanmod.c - ipmi_sim loadable module for junkyard.cluster's fan daemon tests.
 *
 * Loaded through `loadlib "<path>/fanmod.so" "log=<file> faults=<file>"` in
 * lan.conf. It does three things:
 *
 *  1. Answers OEM fan commands the stock simulator rejects: every command on
 *     netfn 0x30, and IANA-prefixed commands on netfn 0x2e for the IANA
 *     numbers given with `iana=<n>` (default 15370, Gigabyte). Each one is
 *     appended to the log file as one line:
 *         <unix time> oem netfn=0x30 cmd=0x70 data=01 64 result=ok
 *  2. Injects faults into every LAN request (or only OEM / only sensor
 *     reads), as described by the faults file. The file is re-read whenever
 *     its modification time or size changes; a missing file means no faults.
 *     Keys (one `key=value` per line, `#` comments):
 *         scope=all|oem|sensor   which requests the faults below apply to
 *         drop_count=K           of every `drop_every` matching requests,
 *         drop_every=N           drop the first K (no answer at all)
 *         delay_ms=D             stall the whole BMC D ms before answering
 *         cc=0xNN                answer with this completion code
 *         empty=1                answer with completion code 0 and no data
 *     Every affected request is logged as well (result=drop/cc=../empty).
 *  3. Counts requests: `<unix time> req netfn=.. cmd=.. result=..` lines are
 *     written for every request when the faults file says `log_all=1`.
 *  4. Models the fans: with `tach=<fan_id>:<sensor>[,<sensor>...]` (once per
 *     zone) the tachometer sensors of a zone move toward duty x `tach_full`
 *     (the raw reading at 100 %, default 165) after a fan command of that
 *     zone, as a first-order lag with time constant `tach_tau_ms` (default
 *     1000). Commands understood: Gigabyte's IANA-prefixed 0x2e 0x10
 *     `<fan_id> 0x01 <duty>` (0x00 0x00: automatic), and the Supermicro-style
 *     0x30 0x70 0x66 0x01 `<zone> <duty>`. Automatic mode runs the fans at
 *     `auto_duty` % (default 30). `ignore_fans=1` models a board whose BMC
 *     accepts the command (completion code 0, logged) but never changes the
 *     fans: the tachometers stay at the automatic speed.
 *
 * Built by bmc_sim/simctl.py against libopenipmi-dev of the installed
 * ipmi_sim (same version), never committed as a binary.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <OpenIPMI/ipmi_err.h>
#include <OpenIPMI/ipmi_mc.h>
#include <OpenIPMI/ipmi_msgbits.h>
#include <OpenIPMI/mcserv.h>
#include <OpenIPMI/serv.h>

#define MAX_IANAS 4
#define OEM_NETFN 0x30
#define GROUP_NETFN 0x2e
#define SENSOR_NETFN 0x04
#define GET_SENSOR_READING 0x2d

enum scope { SCOPE_ALL, SCOPE_OEM, SCOPE_SENSOR };

struct faults {
    enum scope scope;
    unsigned int drop_count;
    unsigned int drop_every;
    unsigned int delay_ms;
    int cc;            /* -1: none */
    int empty;
    int log_all;
};

static sys_data_t *fm_sys;
static char *log_path;
static char *faults_path;
static unsigned int ianas[MAX_IANAS] = { 15370 };
static unsigned int n_ianas = 1;
static struct faults cur_faults = { SCOPE_ALL, 0, 0, 0, -1, 0, 0 };
static struct timespec faults_mtime;
static off_t faults_size = -1;
static unsigned long match_counter;
static int (*prev_handle_msg)(channel_t *chan, msg_t *msg);

#define MAX_TACH_ZONES 8
#define MAX_TACHS 8
#define TACH_TICK_MS 100

struct tach_zone {
    unsigned int fan_id;
    unsigned int n;
    unsigned char sensors[MAX_TACHS];
    double value;     /* raw tach reading now */
    double target;    /* raw tach reading it moves toward */
    int written;      /* raw value last set on the sensors, -1: none */
};

static struct tach_zone tach_zones[MAX_TACH_ZONES];
static unsigned int n_tach_zones;
static unsigned int tach_full = 165;
static unsigned int tach_tau_ms = 1000;
static unsigned int auto_duty = 30;
static int ignore_fans;
static ipmi_timer_t *tach_timer;
static lmc_data_t *fm_bmc;

static int
parse_tach(const char *spec)
{
    struct tach_zone *z;
    char *end;
    unsigned long v;

    if (n_tach_zones >= MAX_TACH_ZONES)
        return EINVAL;
    z = &tach_zones[n_tach_zones];
    memset(z, 0, sizeof(*z));
    z->written = -1;
    v = strtoul(spec, &end, 0);
    if (*end != ':' || v > 255)
        return EINVAL;
    z->fan_id = v;
    do {
        spec = end + 1;
        v = strtoul(spec, &end, 0);
        if (end == spec || v > 255 || z->n >= MAX_TACHS)
            return EINVAL;
        z->sensors[z->n++] = v;
    } while (*end == ',');
    if (*end != '\0')
        return EINVAL;
    n_tach_zones++;
    return 0;
}

static double
duty_to_raw(unsigned int duty)
{
    if (duty > 100)
        duty = 100;
    return (double) duty * tach_full / 100.0;
}

/* A fan command for zone fan_id: duty in %, or -1 for automatic. */
static void
fan_command(unsigned int fan_id, int duty)
{
    unsigned int i;

    if (ignore_fans)
        return;
    for (i = 0; i < n_tach_zones; i++) {
        if (tach_zones[i].fan_id == fan_id)
            tach_zones[i].target = duty_to_raw(duty < 0 ? auto_duty : (unsigned int) duty);
    }
}

static void
tach_tick(void *cb_data)
{
    struct timeval tv = { 0, TACH_TICK_MS * 1000 };
    double alpha = 1.0 - exp(-(double) TACH_TICK_MS / (tach_tau_ms ? tach_tau_ms : 1));
    unsigned int i, j;

    for (i = 0; i < n_tach_zones; i++) {
        struct tach_zone *z = &tach_zones[i];
        int raw;

        z->value += (z->target - z->value) * alpha;
        if (fabs(z->target - z->value) < 0.5)
            z->value = z->target;
        raw = (int) (z->value + 0.5);
        if (raw > 255)
            raw = 255;
        if (raw == z->written || !fm_bmc)
            continue;
        for (j = 0; j < z->n; j++)
            ipmi_mc_sensor_set_value(fm_bmc, 0, z->sensors[j], raw, 0);
        z->written = raw;
    }
    fm_sys->start_timer(tach_timer, &tv);
}

static void
fm_log(const char *kind, unsigned int netfn, unsigned int cmd,
       const unsigned char *pre, unsigned int pre_len,
       const unsigned char *data, unsigned int len, const char *result)
{
    FILE *f;
    struct timeval tv;
    unsigned int i;

    if (!log_path)
        return;
    f = fopen(log_path, "a");
    if (!f)
        return;
    gettimeofday(&tv, NULL);
    fprintf(f, "%ld.%06ld %s netfn=0x%02x cmd=0x%02x data=", (long) tv.tv_sec,
            (long) tv.tv_usec, kind, netfn, cmd);
    for (i = 0; i < pre_len; i++)
        fprintf(f, "%s%02x", i ? " " : "", pre[i]);
    for (i = 0; i < len; i++)
        fprintf(f, "%s%02x", (i || pre_len) ? " " : "", data[i]);
    fprintf(f, " result=%s\n", result);
    fclose(f);
}

static void
reload_faults(void)
{
    struct stat st;
    struct faults nf = { SCOPE_ALL, 0, 0, 0, -1, 0, 0 };
    FILE *f;
    char line[256];

    if (!faults_path)
        return;
    if (stat(faults_path, &st) != 0) {
        if (faults_size != -1) {
            cur_faults = nf;
            faults_size = -1;
            match_counter = 0;
        }
        return;
    }
    if (st.st_size == faults_size
        && st.st_mtim.tv_sec == faults_mtime.tv_sec
        && st.st_mtim.tv_nsec == faults_mtime.tv_nsec)
        return;
    f = fopen(faults_path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *eq = strchr(line, '=');
        char *val;

        if (line[0] == '#' || !eq)
            continue;
        *eq = '\0';
        val = eq + 1;
        if (strcmp(line, "scope") == 0) {
            if (strncmp(val, "oem", 3) == 0)
                nf.scope = SCOPE_OEM;
            else if (strncmp(val, "sensor", 6) == 0)
                nf.scope = SCOPE_SENSOR;
            else
                nf.scope = SCOPE_ALL;
        } else if (strcmp(line, "drop_count") == 0) {
            nf.drop_count = strtoul(val, NULL, 0);
        } else if (strcmp(line, "drop_every") == 0) {
            nf.drop_every = strtoul(val, NULL, 0);
        } else if (strcmp(line, "delay_ms") == 0) {
            nf.delay_ms = strtoul(val, NULL, 0);
        } else if (strcmp(line, "cc") == 0) {
            nf.cc = (int) strtol(val, NULL, 0) & 0xff;
        } else if (strcmp(line, "empty") == 0) {
            nf.empty = strtol(val, NULL, 0) != 0;
        } else if (strcmp(line, "log_all") == 0) {
            nf.log_all = strtol(val, NULL, 0) != 0;
        }
    }
    fclose(f);
    cur_faults = nf;
    faults_size = st.st_size;
    faults_mtime = st.st_mtim;
    match_counter = 0;
}

static int
is_oem(const msg_t *msg)
{
    return msg->netfn == OEM_NETFN || msg->netfn == GROUP_NETFN;
}

static int
in_scope(const msg_t *msg)
{
    switch (cur_faults.scope) {
    case SCOPE_OEM:
        return is_oem(msg);
    case SCOPE_SENSOR:
        return msg->netfn == SENSOR_NETFN && msg->cmd == GET_SENSOR_READING;
    default:
        return 1;
    }
}

/*
 * Called by the LAN channel for every authenticated request, before normal
 * handling. Returning non-zero means "handled": the request gets no answer
 * unless we send one ourselves.
 */
static int
fm_handle_msg(channel_t *chan, msg_t *msg)
{
    const char *kind = is_oem(msg) ? "oem" : "req";

    reload_faults();
    if (in_scope(msg)) {
        int drop = 0;

        if (cur_faults.drop_every && cur_faults.drop_count) {
            drop = (match_counter % cur_faults.drop_every) < cur_faults.drop_count;
            match_counter++;
        }
        if (drop) {
            fm_log(kind, msg->netfn, msg->cmd, NULL, 0, msg->data, msg->len, "drop");
            return 1;
        }
        if (cur_faults.delay_ms)
            usleep(cur_faults.delay_ms * 1000);
        if ((cur_faults.cc >= 0 || cur_faults.empty) && chan->return_rsp) {
            unsigned char rdata[1];
            rsp_msg_t rsp;
            char result[16];

            rdata[0] = cur_faults.cc >= 0 ? cur_faults.cc : 0;
            rsp.netfn = msg->netfn | 1;
            rsp.cmd = msg->cmd;
            rsp.data = rdata;
            rsp.data_len = 1;
            if (cur_faults.cc >= 0)
                snprintf(result, sizeof(result), "cc=0x%02x", cur_faults.cc);
            else
                snprintf(result, sizeof(result), "empty");
            fm_log(kind, msg->netfn, msg->cmd, NULL, 0, msg->data, msg->len, result);
            chan->return_rsp(chan, msg, &rsp);
            return 1;
        }
    }
    if (cur_faults.log_all && !is_oem(msg))
        fm_log(kind, msg->netfn, msg->cmd, NULL, 0, msg->data, msg->len, "ok");
    if (prev_handle_msg)
        return prev_handle_msg(chan, msg);
    return 0;
}

static void
fm_oem_cmd(lmc_data_t *mc, msg_t *msg, unsigned char *rdata,
           unsigned int *rdata_len, void *cb_data)
{
    fm_log("oem", msg->netfn, msg->cmd, NULL, 0, msg->data, msg->len, "ok");
    /* Supermicro-style zone duty: 0x30 0x70 0x66 0x01 <zone> <duty> */
    if (msg->cmd == 0x70 && msg->len >= 4 && msg->data[0] == 0x66 && msg->data[1] == 0x01)
        fan_command(msg->data[2], msg->data[3]);
    rdata[0] = 0;
    *rdata_len = 1;
}

static void
fm_iana_cmd(lmc_data_t *mc, msg_t *msg, unsigned char *rdata,
            unsigned int *rdata_len, void *cb_data)
{
    unsigned char iana[3];

    iana[0] = msg->iana & 0xff;
    iana[1] = (msg->iana >> 8) & 0xff;
    iana[2] = (msg->iana >> 16) & 0xff;
    fm_log("oem", msg->netfn, msg->cmd, iana, 3, msg->data, msg->len, "ok");
    /* Gigabyte: 0x2e 0x10 <IANA> <fan_id> 0x01 <duty> (0x00 0x00: automatic) */
    if (msg->netfn == GROUP_NETFN && msg->cmd == 0x10 && msg->len >= 3)
        fan_command(msg->data[0], msg->data[1] ? (int) msg->data[2] : -1);
    rdata[0] = 0;
    *rdata_len = 1;
}

int
ipmi_sim_module_print_version(sys_data_t *sys, char *initstr)
{
    printf("junkyard fanmod 1\n");
    return 0;
}

int
ipmi_sim_module_init(sys_data_t *sys, const char *initstr_i)
{
    char *initstr = strdup(initstr_i ? initstr_i : "");
    char *next;
    const char *tok;
    unsigned int cmd;
    int rv;

    fm_sys = sys;
    if (!initstr)
        return ENOMEM;
    tok = mystrtok(initstr, " \t\n", &next);
    while (tok) {
        if (strncmp(tok, "log=", 4) == 0) {
            log_path = strdup(tok + 4);
        } else if (strncmp(tok, "faults=", 7) == 0) {
            faults_path = strdup(tok + 7);
        } else if (strncmp(tok, "tach=", 5) == 0) {
            if (parse_tach(tok + 5)) {
                sys->log(sys, SETUP_ERROR, NULL, "fanmod: bad option %s "
                         "(tach=<fan_id>:<sensor>[,<sensor>...])", tok);
                free(initstr);
                return EINVAL;
            }
        } else if (strncmp(tok, "tach_full=", 10) == 0) {
            tach_full = strtoul(tok + 10, NULL, 0);
        } else if (strncmp(tok, "tach_tau_ms=", 12) == 0) {
            tach_tau_ms = strtoul(tok + 12, NULL, 0);
        } else if (strncmp(tok, "auto_duty=", 10) == 0) {
            auto_duty = strtoul(tok + 10, NULL, 0);
        } else if (strncmp(tok, "ignore_fans=", 12) == 0) {
            ignore_fans = strtol(tok + 12, NULL, 0) != 0;
        } else if (strncmp(tok, "iana=", 5) == 0) {
            if (n_ianas == 1 && ianas[0] == 15370)
                n_ianas = 0;
            if (n_ianas < MAX_IANAS)
                ianas[n_ianas++] = strtoul(tok + 5, NULL, 0);
        } else {
            sys->log(sys, SETUP_ERROR, NULL, "fanmod: unknown option %s", tok);
            free(initstr);
            return EINVAL;
        }
        tok = mystrtok(NULL, " \t\n", &next);
    }
    free(initstr);

    for (cmd = 0; cmd < 256; cmd++) {
        rv = ipmi_emu_register_cmd_handler(OEM_NETFN, cmd, fm_oem_cmd, NULL);
        if (rv) {
            sys->log(sys, SETUP_ERROR, NULL,
                     "fanmod: cannot register netfn 0x30 handler: %s", strerror(rv));
            return rv;
        }
    }
    for (cmd = 0; cmd < n_ianas; cmd++) {
        rv = ipmi_emu_register_iana_handler(ianas[cmd], fm_iana_cmd, NULL);
        if (rv) {
            sys->log(sys, SETUP_ERROR, NULL,
                     "fanmod: cannot register IANA %u handler: %s", ianas[cmd],
                     strerror(rv));
            return rv;
        }
    }
    return 0;
}

/* Called after the command file ran: the BMC's LAN channels exist now. */
void
ipmi_sim_module_post_init(sys_data_t *sys)
{
    lmc_data_t *bmc = sys->ipmb_addrs[sys->bmc_ipmb ? sys->bmc_ipmb : 0x20];
    channel_t **chans;
    unsigned int i;
    int hooked = 0;

    if (!bmc) {
        sys->log(sys, SETUP_ERROR, NULL, "fanmod: no BMC at 0x%02x", sys->bmc_ipmb);
        return;
    }
    fm_bmc = bmc;
    if (n_tach_zones) {
        /* The fans start under the BMC's own (automatic) control. */
        for (i = 0; i < n_tach_zones; i++)
            tach_zones[i].value = tach_zones[i].target = duty_to_raw(auto_duty);
        if (sys->alloc_timer(sys, tach_tick, NULL, &tach_timer) == 0)
            tach_tick(NULL);
        else
            sys->log(sys, SETUP_ERROR, NULL, "fanmod: cannot allocate the tach timer");
    }
    chans = sys->mc_get_channelset(bmc);
    for (i = 0; i < IPMI_MAX_CHANNELS; i++) {
        channel_t *chan = chans[i];

        if (!chan || chan->medium_type != IPMI_CHANNEL_MEDIUM_8023_LAN)
            continue;
        prev_handle_msg = chan->oem.oem_handle_msg;
        chan->oem.oem_handle_msg = fm_handle_msg;
        hooked++;
    }
    if (!hooked)
        sys->log(sys, SETUP_ERROR, NULL, "fanmod: no LAN channel to hook");
}
